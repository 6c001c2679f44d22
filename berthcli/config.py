"""Where `berth` finds the portal and its token: BERTH_URL / BERTH_TOKEN, else the
config file (~/.config/berth/config.json, mode 0600, written by `berth login`)."""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path


class ConfigError(Exception):
    """No usable URL or token; the message says how to get one."""


@dataclass
class Config:
    url: str | None
    token: str | None
    path: Path


def config_path() -> Path:
    if os.environ.get("BERTH_CONFIG"):
        return Path(os.environ["BERTH_CONFIG"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "berth" / "config.json"


def load() -> Config:
    """The environment wins over the file, so CI can run without one."""
    path = config_path()
    data = _read(path)
    return Config(
        url=os.environ.get("BERTH_URL") or data.get("url"),
        token=os.environ.get("BERTH_TOKEN") or data.get("token"),
        path=path,
    )


def save(url: str, token: str) -> Path:
    """Write the file readable by its owner only (the token is a password)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token}, f, indent=2)
        f.write("\n")
    os.chmod(path, 0o600)
    return path


def forget_token() -> Path:
    path = config_path()
    data = _read(path)
    if data:
        save(data.get("url", ""), "")
    return path


def _read(path: Path) -> dict:
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return {}
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        print(
            f"berth: warning: {path} is readable by others; run chmod 600 {path}", file=sys.stderr
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} should hold a JSON object")
    return data
