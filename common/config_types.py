"""The vocabulary of the configuration table: value types and the description of one key.

:mod:`gale.config_keys` declares every key with these; :mod:`gale.config` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class Type:
    """A value type: ``check`` says whether a value conforms, ``describe`` names the type."""

    def check(self, value: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Int(Type):
    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.maximum is None or value <= self.maximum

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"an integer from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"an integer >= {self.minimum}"
        return "an integer"


@dataclass(frozen=True)
class Number(Type):
    minimum: float | None = None
    maximum: float | None = None

    def check(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.maximum is None or value <= self.maximum

    def describe(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"a number from {self.minimum} to {self.maximum}"
        return "a number" if self.minimum is None else f"a number >= {self.minimum}"


@dataclass(frozen=True)
class Str(Type):
    choices: tuple[str, ...] = ()

    def check(self, value: Any) -> bool:
        return isinstance(value, str) and (not self.choices or value in self.choices)

    def describe(self) -> str:
        return "a string" if not self.choices else "one of " + ", ".join(self.choices)


@dataclass(frozen=True)
class Bool(Type):
    def check(self, value: Any) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class ListOf(Type):
    item: Type
    min_len: int = 0

    def check(self, value: Any) -> bool:
        return (
            isinstance(value, (list, tuple))
            and len(value) >= self.min_len
            and all(self.item.check(v) for v in value)
        )

    def describe(self) -> str:
        item = self.item.describe()
        for singular, plural in (("an integer", "integers"), ("a string", "strings"), ("a number", "numbers")):
            if item.startswith(singular):
                item = plural + item[len(singular):]
                break
        what = f"a list of {item}"
        return what if not self.min_len else f"{what} (at least {self.min_len})"


@dataclass(frozen=True)
class MapOf(Type):
    value: Type

    def check(self, value: Any) -> bool:
        return isinstance(value, Mapping) and all(
            isinstance(k, str) and self.value.check(v) for k, v in value.items()
        )

    def describe(self) -> str:
        return f"a mapping of string to {self.value.describe()}"


@dataclass(frozen=True)
class Optional(Type):
    inner: Type

    def check(self, value: Any) -> bool:
        return value is None or self.inner.check(value)

    def describe(self) -> str:
        return f"{self.inner.describe()} or null"


@dataclass(frozen=True)
class AnyValue(Type):
    def check(self, value: Any) -> bool:
        return True

    def describe(self) -> str:
        return "any value"


@dataclass(frozen=True)
class Key:
    """One configuration key: Storm's name, its default, its type and what it means. ``secret``
    keys (credentials) are hidden wherever configuration is shown."""

    name: str
    default: Any
    type: Type
    doc: str
    secret: bool = False
