"""A secret setting's value, for processes without pydantic (its ``SecretStr`` stands for it there)."""

from __future__ import annotations


class Secret:
    """Hides its value from ``repr`` and ``str``, like pydantic's ``SecretStr``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    def __str__(self) -> str:
        return "**********" if self._value else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)
