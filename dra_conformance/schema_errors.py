"""One-line messages for JSON Schema violations in user files: the key path and the problem.

Shared by every validated input (scenario catalog, driver profiles), so each says `a.b[2].c: unknown key` the
same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import jsonschema

KeyPath = Sequence[str | int]
TOP_LEVEL = "(top level)"


def format_key_path(steps: KeyPath) -> str:
    """`["run", "args", 2]` -> `run.args[2]`; no steps -> `(top level)`."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in steps)
    return text.lstrip(".") or TOP_LEVEL


def schema_problem(error: jsonschema.ValidationError) -> tuple[KeyPath, str]:
    """Key path and problem of one schema violation; unknown and missing keys are named in the path."""
    steps = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        unknown = next(key for key in error.instance if key not in allowed)
        return [*steps, unknown], "unknown key"
    if error.validator == "required" and isinstance(error.instance, dict) and isinstance(error.validator_value, list):
        missing = next(name for name in error.validator_value if name not in error.instance)
        return [*steps, missing], "missing required field"
    if "propertyNames" in error.relative_schema_path:
        return [*steps, str(error.instance)], f"not a valid key: {' '.join(error.message.split())}"
    if error.validator == "oneOf" and isinstance(error.validator_value, list):
        keys = [key for option in error.validator_value for key in option.get("required", [])]
        return steps, f"needs exactly one of {', '.join(f'`{key}`' for key in keys)}"
    if error.validator == "format" and error.cause is not None:
        return steps, str(error.cause)
    if error.validator == "pattern" and isinstance(error.schema, dict) and "description" in error.schema:
        return steps, f"{error.instance!r} does not match: {error.schema['description']}"
    return steps, " ".join(error.message.split())
