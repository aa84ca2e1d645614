"""The base class of a retrieval method written in Python (docs/adding-a-method.md, "In Python").

A method is a class with declared parameters, as a kvpress press is:

    import numpy as np
    from retro_bench import Method, Param

    class Window(Method):
        '''The last `window` tokens.'''
        paper = "-"
        window = Param(64, min=1, description="most recent tokens kept", source="StreamingLLM")

        def build(self, ctx, keys, values, prefill_queries):   # keys, values: [prompt_len, d]
            pass

        def select(self, queries, step, kv):                   # queries: [group, d]
            return np.arange(max(0, kv.n - self.window), kv.n)

and is named in a config as "py:FILE.py:Window" (retro-bench run, the closed loop). The class's `params`
list, the schema retro-bench's registry reads (name, type, default, description, source, min/max or
choices: python/methods/py_loader.cpp), is made from the Param declarations, base classes' first; the
parameters' values become attributes of the instance. `build` and `select` (and optionally `append`,
`footprint`) are the contract of python/methods/py_adapter.hpp; the base class defines none of them, so a
class that forgets one is refused by name when it is loaded. Metrics are the harness's: a method returns
ids (and, optionally, its traffic), never a score.

A Method also runs outside retro-bench: `Window(window=32)` or `Window({"window": 32})` checks the values
against the declarations as the registry does (unknown names, types, ranges, choices)."""

_TYPES = {bool: "bool", int: "int", float: "number", str: "string"}


class Param:
    """One declared parameter: `name = Param(default, description=..., source=...)` in a Method subclass.

    default:     the value when a config does not set it (its Python type gives the parameter's type
                 unless `type` is given: bool -> "bool", int -> "int", float -> "number", str -> "string")
    type:        "int" | "number" | "bool" | "string"
    min, max:    inclusive bounds of a number
    choices:     the allowed strings of a string parameter
    description: what it sets, in a line (required: `retro-bench list-methods` shows it)
    source:      where the default comes from (a paper's section, a repository's default; required)"""

    def __init__(self, default, *, description, source, type=None, min=None, max=None, choices=None):
        if type is None:
            type = _TYPES.get(default.__class__)
            if type is None:
                raise TypeError(f"Param: cannot infer a type from the default {default!r}; pass type=")
        if type not in ("int", "number", "bool", "string"):
            raise ValueError(f"Param: type {type!r} is not one of int|number|bool|string")
        if not description or not source:
            raise ValueError("Param: description and source are required (retro-bench list-methods shows them)")
        self.default, self.type, self.min, self.max = default, type, min, max
        self.choices = list(choices) if choices is not None else None
        self.description, self.source = description, source
        self.name = None  # set by __set_name__

    def __set_name__(self, owner, name):
        self.name = name

    def spec(self):
        """The registry's schema entry of this parameter (a dict)."""
        d = {"name": self.name, "type": self.type, "default": self.default, "description": self.description,
             "source": self.source}
        if self.min is not None:
            d["min"] = self.min
        if self.max is not None:
            d["max"] = self.max
        if self.choices is not None:
            d["choices"] = self.choices
        return d

    def check(self, value, who):
        """value, checked as the registry checks a config's value; returns it (an int as a number: float)."""
        where = f"{who}: parameter '{self.name}'"
        if self.type == "bool":
            if not isinstance(value, bool):
                raise TypeError(f"{where} must be a bool, got {value!r}")
            return value
        if self.type == "string":
            if not isinstance(value, str):
                raise TypeError(f"{where} must be a string, got {value!r}")
            if self.choices is not None and value not in self.choices:
                raise ValueError(f"{where} must be one of {', '.join(self.choices)}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where} must be a number, got {value!r}")
        if self.type == "int" and value != int(value):
            raise TypeError(f"{where} must be an integer, got {value!r}")
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise ValueError(f"{where} must be in [{self.min}, {self.max}], got {value!r}")
        return int(value) if self.type == "int" else float(value)


class Method:
    """Base class of a Python method: declared parameters (Param), description and paper. See the module's
    documentation for the contract (build, select; append and footprint optional)."""

    description = None  # None: the class docstring's first line
    paper = "-"
    params = []  # made by __init_subclass__ from the Param declarations

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        declared = {}
        for base in reversed(cls.__mro__):
            for name, v in vars(base).items():
                if isinstance(v, Param):
                    declared[name] = v
        cls._declared = declared
        cls.params = [p.spec() for p in declared.values()]
        if cls.__dict__.get("description") is None:
            doc = (cls.__doc__ or "").strip()
            cls.description = doc.splitlines()[0] if doc else f"Python method {cls.__name__}"

    def __init__(self, params=None, **kwargs):
        """params: the values retro-bench resolved (every declared name, checked) or a partial dict; kwargs:
        more values (Window(window=32)). Unset parameters take their defaults."""
        declared = getattr(type(self), "_declared", {})
        values = dict(params or {})
        values.update(kwargs)
        who = type(self).__name__
        unknown = sorted(set(values) - set(declared))
        if unknown:
            raise TypeError(f"{who}: unknown parameter(s) {', '.join(unknown)} (declared: "
                            f"{', '.join(declared) or 'none'})")
        for name, p in declared.items():
            setattr(self, name, p.check(values[name], who) if name in values else p.default)

    def param_values(self):
        """{name: value} of the declared parameters."""
        return {name: getattr(self, name) for name in getattr(type(self), "_declared", {})}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.param_values().items())
        return f"{type(self).__name__}({args})"
