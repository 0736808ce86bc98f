"""The package as a user gets it: the wheel built with ``python -m build``,
installed into a fresh virtual environment, and a smoke check from there
against a real Redis: the synchronous and the asyncio limiter, the ASGI
middleware's modules, ``py.typed``, and the scripts it ships, byte for byte
the files in lua/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LUA

PACKAGE = LUA / "clients" / "python"

SMOKE = r'''
import asyncio, json, sys
from pathlib import Path
import redis, redis.asyncio
import ratelab_client
from ratelab_client import AsyncLimiter, Limiter, Quota, lua_dir
from ratelab_client.asgi import RateLimitMiddleware
from ratelab_client.web import Identify, Policy

url = sys.argv[1]
# Ten an hour, and a timeout a loaded machine cannot miss: the peek below
# finds what the check left, however long the machine takes.
quota = Quota.per_hour(10)
limiter = Limiter(redis.Redis.from_url(url), "gcra", quota, prefix="smoke", timeout=5)
first = limiter.check("alice", 3)

async def main():
    client = redis.asyncio.Redis.from_url(url)
    async with AsyncLimiter(client, "gcra", quota, prefix="smoke", timeout=5) as aio:
        peeked = await aio.peek("alice", 0)
        middleware = RateLimitMiddleware(None, policies=[Policy("default", aio)], identify=Identify(["10.0.0.0/8"]))
    await client.aclose()
    return peeked, middleware

peeked, middleware = asyncio.run(main())
package = Path(ratelab_client.__file__).parent
print(json.dumps({
    "file": ratelab_client.__file__,
    "lua_dir": str(lua_dir()),
    "typed": (package / "py.typed").is_file(),
    "first": [first.allowed, first.remaining],
    "peeked": peeked.remaining,
    "middleware": type(middleware).__name__,
}))
'''


def _run(cmd, cwd, what):
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        pytest.fail(f"{what} failed ({' '.join(map(str, cmd))}):\n{result.stdout[-4000:]}", pytrace=False)
    return result.stdout


def test_the_wheel_installs_into_a_fresh_venv_and_works(tmp_path, server):
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(PACKAGE)], tmp_path, "python -m build")
    [wheel] = dist.glob("ratelab_client-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, "python -m venv")
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)], tmp_path,
         "pip install of the wheel")
    # Run from elsewhere than the repository: the installed package is used.
    out = json.loads(_run([str(python), "-c", SMOKE, server.url], tmp_path, "the smoke check").strip().splitlines()[-1])
    installed = Path(out["file"]).resolve()
    assert str(installed).startswith(str(venv.resolve())), installed
    assert out["typed"] is True
    assert (out["first"], out["peeked"], out["middleware"]) == ([True, 7], 7, "RateLimitMiddleware")
    shipped = Path(out["lua_dir"])
    assert shipped == installed.parent / "lua"
    for path in LUA.glob("*.lua"):
        assert (shipped / path.name).read_bytes() == path.read_bytes(), path.name
    spec = Path("clients") / "algorithms.json"
    assert (shipped / spec).read_bytes() == (LUA / spec).read_bytes()
