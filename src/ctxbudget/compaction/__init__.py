"""Compaction: where to cut, how to shrink a conversation, the handoff summary, the archive."""

from ctxbudget.compaction.archive import Archive, ArchiveState, load_archive
from ctxbudget.compaction.cut import cut_point, cut_points, steps, turns, valid_cut
from ctxbudget.compaction.handoff import FILE_TOOLS, HANDOFF_TEMPLATE, SUMMARY_HEADER
from ctxbudget.compaction.records import message_from_record, message_to_record
from ctxbudget.compaction.strategies import (
    STRATEGY_NAMES,
    CompactionResult,
    compact,
    compaction_target,
)
from ctxbudget.compaction.summarizer import ProviderSummarizer, Summarizer

__all__ = [
    "FILE_TOOLS",
    "HANDOFF_TEMPLATE",
    "STRATEGY_NAMES",
    "SUMMARY_HEADER",
    "Archive",
    "ArchiveState",
    "CompactionResult",
    "ProviderSummarizer",
    "Summarizer",
    "compact",
    "compaction_target",
    "cut_point",
    "cut_points",
    "load_archive",
    "message_from_record",
    "message_to_record",
    "steps",
    "turns",
    "valid_cut",
]
