"""What every part of the stack config shares: its error and its key style."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

# What host tools read for a secret they may not decrypt: the key is set, its value unknown.
UNREAD_SECRET = "[secret]"


class ConfigError(Exception):
    """A stack config value the lab cannot use; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class ConfigModel(BaseModel):
    # camelCase keys like every Pulumi config, unknown keys rejected so typos do not pass silently.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )
