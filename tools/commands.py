"""Step declarations for our own command lines (``python -m tools.campaign``, ``python -m tools.refset``): each
step as data (:class:`Step`: a name, a function and its :class:`Arg` list), one argparse sub-command each. The
installed package's own command line is :mod:`algo_emu.cli` (one JSON job per step)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence


@dataclass(frozen=True)
class Arg:
    """One command-line option: ``add_argument(flag, dest=dest, **kwargs)``; the step's function receives
    it as the keyword argument ``dest`` (default: the flag's name with ``-`` as ``_``)."""

    flag: str
    dest: str = ""
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.dest:
            object.__setattr__(self, "dest", self.name)

    @property
    def name(self) -> str:
        """The flag's name as argparse would make it a dest (``--out-dir`` -> ``out_dir``)."""
        return self.flag.lstrip("-").replace("-", "_")

    def to(self, dest: str = "", **kwargs) -> "Arg":
        """This option passed as ``dest`` (default: its own) and with ``kwargs`` changed."""
        return replace(self, dest=dest or self.dest, kwargs={**self.kwargs, **kwargs})


def arg(flag: str, dest: str = "", **kwargs) -> Arg:
    return Arg(flag, dest, kwargs)


@dataclass(frozen=True)
class Step:
    """One step of an experiment: ``python -m algo_emu <experiment> <name> [args]`` calls ``func(**args)``."""

    name: str
    help: str
    func: Callable[..., Any]
    args: Sequence[Arg]


def _run_step(step: Step, namespace: argparse.Namespace) -> int:
    step.func(**{a.dest: getattr(namespace, a.dest) for a in step.args})
    return 0


def steps_parser(steps: Sequence[Step]) -> Callable[[argparse.ArgumentParser], None]:
    """``add_parser`` of an experiment whose steps are ``steps``."""
    names = [s.name for s in steps]
    if len(set(names)) != len(names):
        raise ValueError(f"steps declared twice: {names}")

    def add_parser(parser: argparse.ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="step", required=True)
        for step in steps:
            p = sub.add_parser(step.name, help=step.help)
            for a in step.args:
                kwargs = dict(a.kwargs)
                if a.dest != a.name and kwargs.get("action") not in ("store_true", "store_false"):
                    kwargs.setdefault("metavar", a.name.upper())  # the help shows the flag's name, not the dest
                if a.flag.startswith("-"):
                    p.add_argument(a.flag, dest=a.dest, **kwargs)
                else:  # a positional argument: argparse names it after itself
                    if a.dest != a.name:
                        raise ValueError(f"positional argument {a.flag!r} cannot be passed as {a.dest!r}")
                    p.add_argument(a.flag, **kwargs)
            p.set_defaults(func=lambda ns, step=step: _run_step(step, ns))

    return add_parser
