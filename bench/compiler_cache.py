"""Compiler cache benchmark: a compile through ccache on a BuildKit cache mount, cold against from the cache, both
through the build tool's `run_build` (so with its prune after each build), on a tiny image of the local base.

Not Caffe (a learner image's rebuild takes many minutes on a shared machine), but Caffe's mechanism: g++ and ccache
from Debian's mirrors in a first step (kept by BuildKit after the first run), then a step that compiles UNITS
template-heavy C++ files, as many at once as the machine has cores, through ccache on a cache mount of its own,
links them, and prints its seconds, ccache's hits and misses and the sha256 of the objects and the binary. The
first build starts from an empty cache (every unit compiled: the baseline); the second changes only the step's
marker, so BuildKit runs the step again and ccache answers. Prints both, their ratio and whether both builds made
the same bytes; removes its images and its cache mount afterwards. Usage: python bench/compiler_cache.py [--units N]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from learnerkit.common import engine
from learnerkit_build.builds.baseimage import base_reference, ensure_base, recipe_for
from learnerkit_build.builds.buildkit import BuildRequest, cache_caps, find_buildkit_cli, prune_argvs, run_build

RESULT = re.compile(r"bench-42 seconds=(\S+) hits=(\d+) misses=(\d+) sha256=(\w+)")
UNIT = """#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <variant>
template <int N> struct Chain {{
  static int run(std::map<std::string, int>& m) {{ m[std::to_string(N)] = N; return Chain<N - 1>::run(m) + N; }}
}};
template <> struct Chain<0> {{ static int run(std::map<std::string, int>&) {{ return 0; }} }};
int unit{index}(const std::string& s) {{
  std::regex pattern("([a-z]+)([0-9]*)");
  std::smatch match;
  std::map<std::string, int> seen;
  std::variant<int, std::string> value = s;
  std::ostringstream out;
  out << std::get<std::string>(value);
  return std::regex_search(s, match, pattern) + Chain<{depth}>::run(seen) + static_cast<int>(out.str().size());
}}
"""


@dataclass(frozen=True)
class Compile:
    seconds: float
    hits: int
    misses: int
    sha256: str


def write_context(folder: Path, base: str, token: str, units: int, marker: str) -> None:
    src = folder / "src"
    src.mkdir(parents=True)
    for index in range(units):
        (src / f"unit{index}.cpp").write_text(UNIT.format(index=index, depth=60 + index), encoding="utf-8")
    calls = "".join(f'total += unit{index}("ab1");\n' for index in range(units))
    declarations = "".join(f"int unit{index}(const std::string&);\n" for index in range(units))
    (src / "main.cpp").write_text(
        f"#include <string>\n{declarations}int main() {{\nint total = 0;\n{calls}return total & 1;\n}}\n",
        encoding="utf-8",
    )
    # The result is printed by the step (`bench-42`), not found in its command line, which BuildKit echoes.
    (folder / "Dockerfile").write_text(
        f"FROM {base}\n"
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends g++ ccache >/dev/null"
        " && rm -rf /var/lib/apt/lists/*\n"
        "COPY src/ /src/\n"
        f"RUN --mount=type=cache,id=learnerkit-bench-ccache-{token},target=/ccache-{token} cd /src && echo {marker}"
        f" && export CCACHE_DIR=/ccache-{token} CCACHE_COMPILERCHECK=content SOURCE_DATE_EPOCH=1767225600"
        " && ccache --zero-stats >/dev/null && start=$(date +%s.%N)"
        ' && ls *.cpp | xargs -P"$(nproc)" -I{} ccache g++ -O2 -c {} -o {}.o && g++ -o app *.o'
        " && end=$(date +%s.%N)"
        " && stats=$(ccache --print-stats | awk '/^(direct|preprocessed)_cache_hit/ {h += $2}"
        ' /^cache_miss/ {m += $2} END {print "hits=" h + 0, "misses=" m + 0}\')'
        ' && echo "bench-$((6 * 7)) seconds=$(awk "BEGIN {print $end - $start}") $stats'
        ' sha256=$(cat *.o app | sha256sum | cut -c1-64)"\n',
        encoding="utf-8",
    )


def build_once(root: Path, base: str, token: str, units: int, marker: str, images: list[str]) -> Compile:
    context = root / marker
    write_context(context, base, token, units, marker)
    lines: list[str] = []
    request = BuildRequest(context=context, image_name="compiler-cache-bench", labels={}, secrets={})
    images.append(run_build(request, lines.append))
    [found] = [m for line in lines if (m := RESULT.search(line))]
    return Compile(float(found.group(1)), int(found.group(2)), int(found.group(3)), found.group(4))


def remove_cache_mount(token: str) -> None:
    """Remove the benchmark's own cache mount records (their description names its target; a prune filtered by
    their IDs)."""
    prune = prune_argvs(find_buildkit_cli(), cache_caps())[0][:-2]
    for record in engine.engine().df().get("BuildCache") or []:
        if f"cached mount /ccache-{token} " in (record.get("Description") or ""):
            subprocess.run([*prune, "--filter", f"id={record['ID']}"], check=True, capture_output=True, timeout=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=8, help="C++ files to compile (default 8)")
    args = parser.parse_args()
    ensure_base(recipe_for("debian-bookworm"), lambda line: None)
    base = base_reference(recipe_for("debian-bookworm"))
    token = uuid.uuid4().hex
    images: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="learnerkit-bench-ccache-") as scratch:
            cold = build_once(Path(scratch), base, token, args.units, "cold", images)
            warm = build_once(Path(scratch), base, token, args.units, "warm", images)
    finally:
        remove_cache_mount(token)
        for image in images:
            engine.engine().images.remove(image, force=True)
    print(f"{args.units + 1} units, {cold.misses} compiled cold, {warm.hits} from the cache")
    print(f"cold (baseline): {cold.seconds:.2f} s   from the cache: {warm.seconds:.2f} s")
    print(f"ratio: x{cold.seconds / warm.seconds:.1f} faster from the cache")
    same = cold.sha256 == warm.sha256
    print(f"objects and binary: {'the same bytes' if same else 'DIFFERENT'} (sha256 {cold.sha256[:16]}...)")
    return 0 if same and warm.misses == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
