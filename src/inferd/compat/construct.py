"""Building pydantic models without validation, faster than ``model_construct``.

``model_construct`` walks every field in Python on each call (~10 us a model);
MLModel runtimes build several models per request, so :func:`construct` sets the
same attributes directly, with each class's defaults looked up once. It works
for any pydantic v2 model: ours, and a real MLServer's when that is installed.
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")

_set = object.__setattr__
# class -> (its fields' defaults, its field names when it keeps extra fields, else None)
_classes: dict[type, tuple[dict[str, Any], frozenset[str] | None]] = {}


def _describe(cls: type) -> tuple[dict[str, Any], frozenset[str] | None]:
    described = _classes.get(cls)
    if described is None:
        # Read once: pydantic's model_fields is a computed class property.
        fields: dict[str, Any] = getattr(cls, "model_fields")  # noqa: B009 - a class attribute
        defaults = {
            name: field.get_default(call_default_factory=True)
            for name, field in fields.items()
            if not field.is_required()
        }
        allows_extra = getattr(cls, "model_config", {}).get("extra") == "allow"
        described = _classes[cls] = (defaults, frozenset(fields) if allows_extra else None)
    return described


def construct(cls: type[T], values: dict[str, Any]) -> T:
    """An instance of the pydantic model ``cls`` holding ``values``, unvalidated, with
    what ``model_construct`` would set: unset fields at their defaults, the given
    names as the fields set, unknown names as extras (for models that allow them)."""
    defaults, known = _describe(cls)
    model = cls.__new__(cls)
    fields = defaults.copy()
    extra: dict[str, Any] | None = None
    if known is None:
        fields.update(values)
    else:
        extra = {}
        for name, value in values.items():
            if name in known:
                fields[name] = value
            else:
                extra[name] = value
    _set(model, "__dict__", fields)
    _set(model, "__pydantic_fields_set__", set(values))
    _set(model, "__pydantic_extra__", extra)
    _set(model, "__pydantic_private__", None)
    return model
