"""Error types. Only the CLI turns these into messages and exit codes."""

from __future__ import annotations


class HpcqaError(Exception):
    """Base of every error hpcqa raises on purpose; exit code 2 means bad input."""

    exit_code = 1

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def render(self) -> str:
        text = f"error: {self.message}"
        if self.hint:
            text += f"\n  fix: {self.hint}"
        return text


class ConfigError(HpcqaError):
    """A config file, a --set override or a value in them is wrong."""

    exit_code = 2

    def __init__(self, key: str, message: str, hint: str = "", source: str = "") -> None:
        where = ": ".join(p for p in (source, key) if p)
        super().__init__(f"{where}: {message}" if where else message, hint)
        self.key = key
        self.source = source
        self.detail = message


class UsageError(HpcqaError):
    """Bad command-line input that is not a config key (missing file, bad flag value)."""

    exit_code = 2


class PlanError(HpcqaError):
    """The config is valid but cannot be laid out (e.g. not enough cores)."""

    exit_code = 2


class DistEnvError(HpcqaError):
    """The launcher's environment is malformed or inconsistent."""

    exit_code = 2


class SubmitError(HpcqaError):
    """The scheduler refused or failed a submission."""

    exit_code = 1


class SchedulerUnreachable(HpcqaError):
    """The scheduler's controller does not answer: nothing was submitted."""

    exit_code = 2


class JobFailed(HpcqaError):
    """A job ran and failed."""

    exit_code = 1


class RankError(HpcqaError):
    """A rank cannot run the plan it was given (backend missing on this node, plan mismatch)."""

    exit_code = 2


class RegistryError(HpcqaError):
    """The job registry file is missing its place, damaged, or not a registry."""

    exit_code = 2
