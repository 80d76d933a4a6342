"""The RAS exceptions (parsers and client); the tree, with the rest of ranksight's, is drawn in :mod:`ranksight.errors`."""

from __future__ import annotations

from ranksight.errors import NoEndpoint, ParseError, RanksightError


class RasError(RanksightError):
    pass


class RasParseError(RasError, ParseError):
    pass


class RasClientError(RasError):
    pass


class RasRefused(RasClientError, NoEndpoint):
    pass


class RasTimeout(RasClientError, NoEndpoint):
    pass


class RasReset(RasClientError):
    pass


class RasReplyError(RasClientError):
    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply

    @property
    def unknown_command(self) -> bool:
        return self.reply.startswith("ERROR: Unknown command")


class RasOversized(RasClientError):
    pass
