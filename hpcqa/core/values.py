"""What a config string may hold, wherever it goes: checks shared by validation and the emitters (pure, but for
shell_syntax, which asks this host whether a path with a $ in it exists as written).

A value is data: it may not carry a line break or any other control character (a `#SBATCH` line, a heredoc, a
YAML scalar or a log line cannot hold one safely), and it may not be a credential -- the whole config is written
to the plan, the registry, the dry run and the job folder, so a secret is refused by its shape as well as by the
name of the variable that carries it.
"""

from __future__ import annotations

import os
import re

from hpcqa.text import CONTROL, control_char, shown  # noqa: F401  (the checks here use them; others import them from here too)

# Credential shapes: what providers issue (prefixes documented by Hugging Face, GitHub, AWS, Slack, GitLab,
# OpenAI), private-key blocks, and URLs with a password in them.
SECRET_SHAPES: tuple[tuple[str, re.Pattern], ...] = (
    ("a Hugging Face token (hf_...)", re.compile(r"\bhf_[A-Za-z0-9]{20,}")),
    ("a GitHub token (ghp_/gho_/ghs_/ghu_/ghr_...)", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
    ("a GitHub token (github_pat_...)", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}")),
    ("an AWS access key id (AKIA.../ASIA...)", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("a Slack token (xox...)", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("a GitLab token (glpat-...)", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),
    ("an API key (sk-...)", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("an API key (sk_live_/rk_live_...)", re.compile(r"\b[sr]k_live_[A-Za-z0-9]{16,}")),
    ("a Google API key (AIza...)", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("an npm token (npm_...)", re.compile(r"\bnpm_[A-Za-z0-9]{36}")),
    ("a PyPI token (pypi-...)", re.compile(r"\bpypi-[A-Za-z0-9_-]{50,}")),
    ("a JSON web token (eyJ...)", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.")),
    ("a bearer token", re.compile(r"\bBearer\s+[A-Za-z0-9._~+/-]{20,}")),
    ("a Slack webhook", re.compile(r"hooks\.slack\.com/services/")),
    ("a private key block", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY")),
    # the scheme starts where no scheme character precedes it: tried from every letter of a long word, the match
    # was quadratic (a 64 KiB argument took 17 s to check)
    (
        "a URL with a password (user:password@host)",
        re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),
    ),
    (
        "a credential given as a parameter (password=, token=, api_key= ...)",
        re.compile(
            r"\b(password|passwd|secret|api_?key|access_token|auth_token|token)=[^\s&$'\"]{4,}",
            re.I,
        ),
    ),
)

# Parts of a variable name (split on '_') that say it carries a credential; TOKENIZERS_PARALLELISM passes.
_CREDENTIAL_PARTS = {
    "token",
    "tokens",
    "apikey",
    "secret",
    "secrets",
    "password",
    "passwd",
    "pass",
    "pwd",
    "credential",
    "credentials",
    "pat",
    "auth",
    "private",
    "privatekey",
    "passphrase",
    "cookie",
}
_CREDENTIAL_PAIRS = {
    ("api", "key"),
    ("access", "key"),
    ("secret", "key"),
    ("private", "key"),
    ("auth", "header"),
}

# Variables hpcqa sets itself (the snapshot's import path, the preloads, its own protocol): launch.env and
# launch.pass_env may not set them, or the provenance would name code that did not run.
MANAGED_ENV = re.compile(
    r"PYTHON(PATH|HOME|SAFEPATH|STARTUP|USERBASE|NOUSERSITE|PLATLIBDIR|EXECUTABLE)|LD_[A-Z_]+"
    r"|HPCQA_[A-Za-z0-9_]*|SUBMITIT_[A-Za-z0-9_]*",
    re.I,
)


# each rank's identity and rendezvous, which hpcqa sets per rank from the scheduler's variables
RANK_ENV = re.compile(
    r"RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|NODE_RANK|ROLE_RANK|MASTER_ADDR|MASTER_PORT"
    r"|SLURM_[A-Z0-9_]+|PMI_[A-Z0-9_]+|OMPI_COMM_WORLD_[A-Z_]+"
)


def secret_shape(text: str) -> str | None:
    """What kind of credential `text` contains, or None."""
    for what, pattern in SECRET_SHAPES:
        if pattern.search(text):
            return what
    return None


def credential_name(name: str) -> bool:
    """A variable name that says it carries a credential (HF_TOKEN, WANDB_API_KEY, DB_PASS, GH_PAT ...)."""
    parts = [p for p in name.lower().split("_") if p]
    if not parts:
        return False
    if parts[-1] == "key" or any(p in _CREDENTIAL_PARTS for p in parts):
        return True
    return any(pair in _CREDENTIAL_PAIRS for pair in zip(parts, parts[1:]))


ASSIGNMENT = re.compile(
    r"(?:^|[\s;&|(])(?:export\s+|declare\s+-x\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S?)(\S?)"
)


def assigned_credentials(line: str) -> list[str]:
    """Variables with credential names that a shell line sets to a literal (`export HF_TOKEN=hf_...`). Taking it from
    elsewhere (`HF_TOKEN=$(cat ~/.hf_token)`, `="$TOKEN_FROM_ENV"`) writes no secret: allowed."""
    return [
        name
        for name, first, second in ASSIGNMENT.findall(line)
        if credential_name(name) and first and first != "$" and (first, second) != ('"', "$")
    ]


SHELL_VARIABLE = re.compile(r"\$(\{|[A-Za-z_])")


def shell_syntax(path: str) -> str | None:
    """Why a path value holds what only a shell expands (None: it holds none): a leading ~ or a $VARIABLE. A config
    value reaches the ranks quoted, as written -- `~/runs` would be a folder named "~" in the current directory, and
    `$SCRATCH` a folder of that name (or another node's $TMPDIR had it been expanded here). A path that exists as
    written, naming no variable set here, is a file whose name holds a $, and passes."""
    if path.startswith("~"):
        return "starts with ~, which only a shell expands (to a home folder)"
    names = re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", path)
    if not names:
        return None
    if os.path.lexists(path) and not any(n in os.environ for n in names):
        return None  # a file whose name holds a $ (no such variable here): that very file is meant
    return "holds a $VARIABLE, which only a shell expands"
