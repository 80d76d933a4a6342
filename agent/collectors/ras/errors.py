"""The RAS exception tree, in one place::

RasError
├── RasParseError            bytes that are not a RAS status / monitor output (parsers)
└── RasClientError           talking to a RAS endpoint failed (client)
    ├── RasRefused           nothing listens on any address of the endpoint
    ├── RasTimeout           connect or reply deadline passed
    ├── RasReset             the connection was reset or closed before the reply was complete
    ├── RasReplyError        the server answered ``ERROR: ...``
    └── RasOversized         the reply exceeded the configured byte limit
"""

from __future__ import annotations


class RasError(Exception):
    pass


class RasParseError(RasError, ValueError):
    pass


class RasClientError(RasError):
    pass


class RasRefused(RasClientError):
    pass


class RasTimeout(RasClientError):
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
