"""The wheel ships the very files of the repository's ``lua/``: the shared
prologue, every algorithm's script as ``lua/clients/algorithms.json`` lists
them (links to the algorithm crates' files, their contents copied), and that
spec, which the package reads at run time. Nothing here names an algorithm:
a new one is shipped once the spec lists it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: Dict[str, Any]) -> None:
        lua = Path(self.root).resolve().parent.parent
        spec = lua / "clients" / "algorithms.json"
        algorithms = json.loads(spec.read_text(encoding="utf-8"))["algorithms"]
        files = ["prologue.lua", *(a["script"] for a in algorithms)]
        for file in files:
            build_data["force_include"][str((lua / file).resolve())] = f"ratelab_client/lua/{file}"
        build_data["force_include"][str(spec)] = "ratelab_client/lua/clients/algorithms.json"
