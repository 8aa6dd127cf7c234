"""Baseline critics: well-known static analyzers as critics, one definition each.

A baseline's definition names the analyzer, its exact installed version and its rule set
(all three are in its config, so in its digest): a run reports what that version with those
rules finds, and a report compares an LLM critic with it on the same defects. The analyzers
come with `props[baselines]`; the critic itself is `props.reactors.agents.baseline_critic`.
"""

from __future__ import annotations

import importlib.metadata
import re
from typing import Any, Literal

from props.core.domain import catalog, definitions
from props.core.log import errors

MODULE = "props.reactors.agents.baseline_critic"

# Each tool's rules: pyflakes, pycodestyle's errors, bugbear and bandit's checks as ruff has
# them; every test bandit ships; pylint's errors and warnings.
RULES: dict[str, tuple[str, ...]] = {"ruff": ("E", "F", "B", "S"), "bandit": ("all",),
                                     "pylint": ("E", "W")}


# What a rule can be about. `style`: only how the code looks (line length, whitespace, blank
# lines, naming, import order, quotes, docstrings), never what it does: such a finding is
# never a candidate for a defect, wherever it lies (props.core.scoring.candidates). The rest
# may be about a defect: `security` (a tool's security checks), `correctness` (everything
# else, the unknown included: a rule is style only when the table says so).
Category = Literal["style", "security", "correctness"]

# Per tool, the rule ids (by prefix; the longest prefix that matches decides) and their
# category. Conservative: a rule that can be a defect (E711 `== None`, E722 bare except,
# W605 invalid escape, F401 unused import, pylint's fixme) is not style. Rules outside the
# selected sets (`RULES`) are listed too, so a definition that selects more is covered.
CATEGORIES: dict[str, dict[str, Category]] = {
    "ruff": {
        "": "correctness",
        "E1": "style",  # indentation (pycodestyle E1xx)
        "E2": "style",  # whitespace
        "E3": "style",  # blank lines
        "E4": "style",  # imports: several on one line, not at the top
        "E5": "style",  # line length
        "E70": "style",  # statements on one line, semicolons
        "E731": "style",  # a lambda assigned to a name
        "E74": "style",  # ambiguous names (l, O, I)
        "W1": "style", "W2": "style", "W3": "style", "W5": "style",  # tabs, whitespace,
        # blank lines, line breaks (W6, deprecated escapes and the like, is not style)
        "I": "style",  # import order (isort)
        "N": "style",  # naming (pep8-naming)
        "D": "style",  # docstrings (pydocstyle)
        "Q": "style",  # quotes
        "COM": "style",  # trailing commas
        "S": "security",  # bandit's checks, as ruff has them
    },
    # Every bandit test is a security check.
    "bandit": {"": "security"},
    # pylint: the message id's letter is its kind; C (convention) and I (informational) are
    # never about behaviour; of W, only the pure layout ones.
    "pylint": {
        "": "correctness",
        "C": "style",
        "I": "style",
        "W0107": "style",  # unnecessary-pass
        "W0108": "style",  # unnecessary-lambda
        "W0301": "style",  # unnecessary-semicolon
        "W0311": "style",  # bad-indentation
        "W0404": "style",  # reimported
    },
}

# What the critic writes first in a rationale: `[E501] ...`, `[W0311 bad-indentation] ...`.
_RULE = re.compile(r"\[([A-Za-z]+[0-9]*)[^\]]*\]")
TOOL_PREFIX = "baseline-"  # a baseline's definition is `baseline-<tool>` (`local`)


def category(tool: str, rule: str) -> Category:
    """The category of `tool`'s rule `rule` (its id: `E501`, `W0311`, `B101`)."""
    table = CATEGORIES[tool]
    return table[max((p for p in table if rule.startswith(p)), key=len)]


def rule_of(rationale: str) -> str | None:
    """The rule id a baseline's issue names first in its rationale (`[E501] Line too
    long` -> `E501`), if it does."""
    found = _RULE.match(rationale)
    return None if found is None else found.group(1)


def tool_of(definition: str) -> str | None:
    """The baseline tool of a definition's name (`baseline-ruff` -> `ruff`), if it is one."""
    tool = definition.removeprefix(TOOL_PREFIX)
    return tool if definition.startswith(TOOL_PREFIX) and tool in CATEGORIES else None


def config(tool: str) -> dict[str, Any]:
    """The definition's config for `tool` as installed here: its exact version and rules."""
    if tool not in RULES:
        raise errors.ConfigurationError(f"unknown baseline {tool!r}; known: {', '.join(RULES)}")
    try:
        version = importlib.metadata.version(tool)
    except importlib.metadata.PackageNotFoundError:
        raise errors.ConfigurationError(
            f"{tool} is not installed: pip install 'props[baselines]'") from None
    # "pragmas": the example's own noqa, nosec and pylint comments are ignored (in
    # the digest: a definition that honoured them reported other findings).
    return {"tool": tool, "version": version, "rules": list(RULES[tool]), "pragmas": "ignored"}


def command() -> list[str]:
    return definitions.reference_command(MODULE)


def local(tool: str) -> catalog.DefinitionPushed:
    """The baseline critic `tool` as a local command (definition `baseline-<tool>`)."""
    settings = config(tool)
    run = command()
    return catalog.DefinitionPushed(
        agent_type="critic", name=f"{TOOL_PREFIX}{tool}", tag="local", runtime="local",
        image=f"local:{MODULE}", command=run, config=settings,
        digest=definitions.local_digest(run, settings))
