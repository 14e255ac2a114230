"""A stand-in for torchvision, on the probe's PYTHONPATH only.

The CPU build of vLLM has no torchvision, and importing vLLM's Qwen3.5 model
classes (to inspect the target's architecture) pulls in transformers' Qwen2-VL
image processor, which imports it. The probe never processes an image: any
name it asks for is an empty class.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class _Anything(type):
    def __getattr__(cls, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname.startswith(f"{__name__}."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        return None


sys.meta_path.insert(0, _Submodules())
__version__ = "0.0"


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything(name, (), {})
