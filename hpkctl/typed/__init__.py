"""Typed models without a schema library: classes whose annotations are their validation rules.

The subset of pydantic's API that hpkctl's pod and site-profile models use, with pydantic's names,
error types and texts (the messages users see are built from them), in plain Python: the CLI's
``run`` and ``render`` import no pydantic (issue 23: its import and schema build were most of the
CPU before ``sbatch``). A leaf package: it imports nothing of hpkctl.
"""

from hpkctl.typed.errors import RuleError, ValidationError
from hpkctl.typed.fields import (
    AfterValidator,
    BeforeValidator,
    Field,
    FieldInfo,
    field_validator,
    model_validator,
    to_camel,
)
from hpkctl.typed.model import BaseModel, ConfigDict, Model

__all__ = ["AfterValidator", "BaseModel", "BeforeValidator", "ConfigDict", "Field", "FieldInfo", "Model", "RuleError",
           "ValidationError", "field_validator", "model_validator", "to_camel"]
