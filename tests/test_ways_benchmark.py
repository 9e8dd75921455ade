"""benchmarks/ways.py on a tiny package written to tmp_path: a followed value goes through assignments,
constructors, ``self.attr`` and method calls, and the stays, files, folders and climbs back up are counted."""

from pathlib import Path
from scripts import load_script

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    "__init__.py": "",
    "vocab.py": "def fmt(x):\n    return str(x)\n\ndef unused(x):\n    return x\n",
    "gate/__init__.py": "from .verdicts import Gate\n",
    "gate/verdicts.py": (
        "from ..vocab import fmt\n"
        "\n"
        "class Gate:\n"
        "    def __init__(self, settings):\n"
        "        self.settings = settings\n"
        "        self.count = 0\n"
        "\n"
        "    def spec(self):\n"
        "        return self.settings.spec\n"
        "\n"
        "    def bump(self):\n"
        "        self.count += 1\n"
        "\n"
        "    def judge(self, m):\n"
        "        v = m.value\n"
        "        text = fmt(v)\n"
        "        from ..plugin.hooks import shout\n"
        "        shout(word=text)\n"
        "        self.bump()\n"
        "        return text\n"
    ),
    "plugin/__init__.py": "",
    "plugin/hooks.py": "def shout(word):\n    print(word)\n\ndef quiet():\n    pass\n",
    "plugin/session.py": (
        "from ..gate import Gate\n"
        "from ..vocab import unused\n"
        "from .hooks import quiet\n"
        "\n"
        "class Other:\n"
        "    def judge(self, m):\n"
        "        return m\n"
        "\n"
        "def start(config, other):\n"
        "    s = config.settings\n"
        "    g = Gate(s)\n"
        "    g.judge(config.measurement)\n"
        "    unused(other)\n"
        "    quiet()\n"
    ),
}


def _ways():
    return load_script(Path("benchmarks/ways.py"))


def _package(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "pkg"


def test_ways_follows_data_flow_methods_and_the_class_then_counts_stays_files_folders_and_climbs(tmp_path):
    ways = _ways()
    way = ways.follow(ways.Package(_package(tmp_path)), "plugin/session.py:start:config")
    names = [f.qualname for f in way.visited]
    # config -> s (assignment) -> Gate(s) (constructor, through the gate package's re-export) -> self.settings
    # read in Gate.spec (the class rule); g (built from s) -> g.judge, Gate's not Other's (g's class is known);
    # m.value -> v -> fmt(v) -> text -> shout(word=text) (keyword): a step from gate/ up into plugin/
    assert names == ["start", "Gate.__init__", "Gate.spec", "Gate.judge", "fmt", "shout"]
    assert "unused" not in names and "quiet" not in names and "Gate.bump" not in names
    figures = way.figures()
    assert (figures["stays"], figures["files"], figures["folders"], figures["climbs_back_up"]) == (6, 4, 3, 1)
    assert ways.line(way) == "plugin/session.py:start:config: 6 stays in 4 files over 3 folders, 1 climbs back up"


def test_ways_return_start_follows_one_attribute_of_the_result_into_its_callers(tmp_path):
    ways = _ways()
    pkg = _package(tmp_path)
    (pkg / "plugin" / "settings.py").write_text(
        "class Settings:\n    def __init__(self, baseline, other):\n        self.baseline = baseline\n"
        "        self.other = other\n\n"
        "def read():\n    return Settings(baseline='x', other=1)\n")
    (pkg / "plugin" / "open.py").write_text(
        "from .settings import read\nfrom .hooks import shout, quiet\n\n"
        "def open_session():\n    s = read()\n    shout(s.baseline)\n    quiet(s.other)\n")
    way = ways.follow(ways.Package(pkg), "plugin/settings.py:read:return.baseline")
    assert [f.qualname for f in way.visited] == ["read", "open_session", "shout"]


def test_ways_pairs_a_tuple_assigned_from_a_tuple_element_by_element(tmp_path):
    ways = _ways()
    pkg = _package(tmp_path)
    (pkg / "plugin" / "pool.py").write_text(
        "from ..vocab import fmt\nfrom .hooks import shout, quiet\n\n"
        "class Pool:\n"
        "    def __init__(self):\n        self._workers = []\n\n"
        "    def stop(self, state):\n        done, self._workers = state, []\n        shout(done)\n\n"
        "    def pids(self):\n        return [quiet(w) for w in self._workers]\n\n"
        "def swap(a, b):\n    x, (y, z) = b, (a, b)\n    fmt(x)\n    shout(y)\n\n"
        "def whole(a, b):\n    x, y = pair = (a, b)\n    p, q = a\n    shout(x, pair, p)\n")
    way = ways.follow(ways.Package(pkg), "plugin/pool.py:Pool.stop:state")
    # done gets state, self._workers only []: Pool.pids, which reads self._workers, is not a stay
    assert [f.qualname for f in way.visited] == ["Pool.stop", "shout"]
    # x gets b, y gets a (nested): shout(y) is a step from a, fmt(x) is not
    assert [f.qualname for f in ways.follow(ways.Package(pkg), "plugin/pool.py:swap:a").visited] == ["swap", "shout"]
    # a value that is not written as a tuple of the same length goes to every element, as before
    assert [f.qualname for f in ways.follow(ways.Package(pkg), "plugin/pool.py:whole:a").visited] == [
        "whole", "shout"]
