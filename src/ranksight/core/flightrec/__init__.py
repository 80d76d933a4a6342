"""PyTorch Flight Recorder dumps: read them safely (:mod:`.load`) and match them across ranks (:mod:`.match`).

Pure and dependency-free, on the core floor: the agent validates what it collects with it, the aggregator and
``ranksight analyze hang`` match with it.
"""

from ranksight.core.flightrec.load import DumpError, Frame, RankDump, ThreadStack, parse_dump, read_directory
from ranksight.core.flightrec.match import Finding, HangReport, analyze

__all__ = [
    "DumpError",
    "Finding",
    "Frame",
    "HangReport",
    "RankDump",
    "ThreadStack",
    "analyze",
    "parse_dump",
    "read_directory",
]
