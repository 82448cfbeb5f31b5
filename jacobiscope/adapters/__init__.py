"""Adapters: any Hugging Face block (or its attention, in the ItrSA form) as a looped map."""
from .capture import ReplayedModule, capture_calls, strip_caches
from .check import AdapterCheckError, AdapterCheckResult, check_adapter
from .inputs import InputError, ModelInputs, prepare_inputs
from .looped import LoopedAttention, looped_block, prepare_model
from ._plan import MapPlan, plan_maps
from ._source import InputMaps, MapProvenance, MapSource, map_source
from .native import Recurrence, list_recurrences, native_loop, register_recurrence, shared_module_recurrence
from .spec import AdapterError, AdapterSpec, find_blocks, get_adapter_spec, register_adapter, shipped_adapter_specs

__all__ = [
    "AdapterCheckError",
    "AdapterCheckResult",
    "AdapterError",
    "AdapterSpec",
    "InputError",
    "InputMaps",
    "LoopedAttention",
    "MapPlan",
    "MapProvenance",
    "MapSource",
    "ModelInputs",
    "ReplayedModule",
    "capture_calls",
    "check_adapter",
    "find_blocks",
    "get_adapter_spec",
    "looped_block",
    "map_source",
    "plan_maps",
    "prepare_inputs",
    "prepare_model",
    "Recurrence",
    "list_recurrences",
    "native_loop",
    "register_recurrence",
    "shared_module_recurrence",
    "register_adapter",
    "shipped_adapter_specs",
    "strip_caches",
]
