"""toolgym's grading reporter: a pytest plugin that runs inside the sandbox, never imported by toolgym.

The harness writes this file, under a random module name, to a directory outside the repository,
with a one-time settings file beside it, and loads it with ``-p <name>`` (before any conftest,
ini ``addopts`` or code of the repository can run). It records each test's outcome as pytest's
``-rA`` summary would name it and looks for tampering. Last of all (``pytest_unconfigure``) it
kills the processes the run started, writes its findings, stamped with the settings' nonce, to a
result file that the harness reads, and ends the process with the session's exit status. The
settings file is deleted as soon as it is read, so code of the repository cannot learn the nonce
from disk.

Tampering it reports (any one makes the grade 0):
- a function or class of pytest, pluggy, unittest (or of ``builtins``, ``os``, ``hashlib``,
  ``json``, which the checks use) replaced by code from an untrusted file after this plugin was
  loaded, or defined in a file inside the repository;
- a plugin registered after start-up that is neither one of the repository's conftest files that
  existed before any of its code ran, nor a module those conftests name in ``pytest_plugins``, nor
  code from a read-only place outside the repository; a plugin module of the repository that the
  candidate patch changed (the settings list the files the patch touched);
- an import hook added from inside the repository or from a writable place;
- a test file, conftest or ini file changed while the tests ran;
- a test whose call raised but whose report says it passed;
- a test module loaded by an import hook of the code under test (one that removed itself after).

Kept compatible with Python 3.6 and old pytest versions (SWE-bench images hold both).
"""

import hashlib
import json
import os
import sys
from typing import Any  # noqa: F401  (used in type comments)

import pytest

_settings_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "settings.json")
with open(_settings_path) as _f:
    _SETTINGS = json.load(_f)
os.unlink(_settings_path)

_ROOT = os.path.realpath(_SETTINGS["root"])
_OUT = _SETTINGS["out"]
# what the checks use, taken before any code of the repository runs (which may replace the originals)
_open, _dumps, _replace, _realpath, _exit = open, json.dumps, os.replace, os.path.realpath, os._exit
_sha256, _walk, _listdir, _access, _exists, _isfile, _kill = (
    hashlib.sha256,
    os.walk,
    os.listdir,
    os.access,
    os.path.exists,
    os.path.isfile,
    os.kill,
)
_UID = os.geteuid()
_WATCHED = ("pytest", "_pytest", "pluggy", "unittest", "builtins", "os", "posixpath", "hashlib", "json")
_INI_NAMES = ("pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "conftest.py")
_SKIP_DIRS = {".git", "__pycache__", ".tox", "node_modules", ".eggs", ".pytest_cache"}

_tests = {}  # type: dict[str, list[str]]  # nodeid -> statuses seen (PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS)
_tampered = []  # type: list[str]
_state = {
    "snapshot": None,
    "trusted_ids": set(),
    "hashes": {},
    "conftests": set(),
    "plugins": set(),
    "hooks": None,
}  # type: dict[str, Any]


def _flag(reason):
    if reason not in _tampered:
        _tampered.append(reason)


def _inside_root(path):
    if not path or path.startswith("<") or not os.path.isabs(path):
        return False  # built-in and frozen modules
    real = _realpath(path)
    return real == _ROOT or real.startswith(_ROOT + os.sep)


def _source_file(obj):
    code = getattr(obj, "__code__", None)
    if code is not None:
        return code.co_filename
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return getattr(module, "__file__", None)


def _under(path, prefix):
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/")


def _trusted_file(path):
    """Outside the repository, and either under a prefix the settings trust (pytest's zip that
    toolgym put in /tmp: the prefix itself or below it, never a name that merely starts with it) or
    owned by another user and not writable by this process (a file the code under test made, and
    made read-only, is still its own)."""
    if not path or path.startswith("<") or _inside_root(path):
        return False
    real = _realpath(path)
    if any(_under(real, _realpath(prefix)) for prefix in _SETTINGS.get("trusted") or ()):
        return True
    probe = real
    while probe and probe != "/" and not _exists(probe):  # a file inside a zip: check the zip
        probe = os.path.dirname(probe)
    if not probe or probe == "/":
        return False
    try:
        owner = os.stat(probe).st_uid
    except OSError:
        return False
    return owner != _UID and not _access(probe, os.W_OK)


def _watched_modules():
    for name, module in list(sys.modules.items()):
        if module is not None and name.split(".")[0] in _WATCHED:
            yield name, module


def _members(owner):
    for attr, value in list(vars(owner).items()):
        if isinstance(value, (classmethod, staticmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if callable(value):
            yield attr, value


def _snapshot():
    """Every callable of the watched modules and of the classes they define."""
    seen = {}
    for name, module in _watched_modules():
        for attr, value in _members(module):
            seen[(name, attr)] = value
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for member, inner in _members(value):
                    seen[(name, attr, member)] = inner
    return seen


def _trusted_callable(value):
    """One of the objects the watched modules held when this plugin took its baseline (pytest swaps
    a few methods of its own for others it defined, e.g. legacypath). Identity, not the file a
    function names: a code object's ``co_filename`` is whatever its compiler was told."""
    return id(value) in _state["trusted_ids"]


def _repository_functions():
    for name, module in _watched_modules():
        if _inside_root(getattr(module, "__file__", None)):
            _flag(f"{name} is loaded from the repository")
        for attr, value in _members(module):
            if _inside_root(
                _source_file(value)
                if not isinstance(value, type)
                else getattr(sys.modules.get(value.__module__), "__file__", None)
            ):
                _flag(f"{name}.{attr} is defined in the repository")


def _hash(path):
    try:
        with _open(path, "rb") as f:
            return _sha256(f.read()).hexdigest()
    except OSError:
        return None


def _protected_files(args):
    """Test files named on the command line, and every conftest and ini file of the repository."""
    files = set()
    for arg in args:
        path = os.path.join(_ROOT, str(arg).split("::")[0])
        if _isfile(path):
            files.add(_realpath(path))
    for top, dirs, names in _walk(_ROOT):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS]
        for name in names:
            if name in _INI_NAMES:
                files.add(_realpath(os.path.join(top, name)))
    return files


def _baseline(config, args):
    _state["snapshot"] = _snapshot()
    _state["trusted_ids"] = {id(v) for v in _state["snapshot"].values()}
    _repository_functions()
    files = _protected_files(args)
    _state["hashes"] = {p: _hash(p) for p in files}
    _state["conftests"] = {p for p in files if os.path.basename(p) == "conftest.py"}
    _state["plugins"] = {id(p) for p in config.pluginmanager.get_plugins()}
    _state["hooks"] = (list(map(id, sys.meta_path)), list(map(id, sys.path_hooks)))


def _check(config, when):
    if _state["snapshot"] is None:
        _flag(f"the reporter's baseline was never taken (at {when})")
        return
    now = _snapshot()
    for key, before in _state["snapshot"].items():
        after = now.get(key, before)
        if after is not before and not _trusted_callable(after):
            _flag(f"{'.'.join(key)} was replaced by code under test")
    for path, digest in _state["hashes"].items():
        if _hash(path) != digest:
            _flag(f"{os.path.relpath(path, _ROOT)} changed while the tests ran")
    pm = config.pluginmanager
    plugins = [p for p in pm.get_plugins() if p is not None]
    module_type = type(os)

    def conftest(plugin):
        source = getattr(plugin, "__file__", None)
        return source is not None and _realpath(source).replace(".pyc", ".py") in _state["conftests"]

    # plugins the repository's own conftests (or plugins loaded before its code ran) ask for by name
    named = set()
    while True:
        before = len(named)
        for plugin in plugins:
            if isinstance(plugin, module_type) and (
                id(plugin) in _state["plugins"] or conftest(plugin) or plugin.__name__ in named
            ):
                wanted = getattr(plugin, "pytest_plugins", ())
                named.update([wanted] if isinstance(wanted, str) else list(wanted or ()))
        if len(named) == before:
            break
    patched = set(_SETTINGS.get("patched") or ())
    for plugin in plugins:
        if isinstance(plugin, module_type):
            source = getattr(plugin, "__file__", None)
            if conftest(plugin):
                continue
            if (
                _inside_root(source)
                and os.path.relpath(_realpath(source), _ROOT).replace(".pyc", ".py") in patched
            ):
                _flag(f"plugin module {plugin.__name__} was changed by the patch")
            if id(plugin) in _state["plugins"] or plugin.__name__ in named:
                continue
        elif id(plugin) in _state["plugins"]:
            continue
        else:  # a class (pytest registers some as plugins) or an instance
            owner = plugin if isinstance(plugin, type) else type(plugin)
            source = getattr(sys.modules.get(owner.__module__), "__file__", None)
        if not _trusted_file(source):
            _flag(f"plugin {pm.get_name(plugin)!r} from {source} was registered by the code under test")
    metas, path_hooks = _state["hooks"]
    for finder in sys.meta_path:
        if id(finder) not in metas and not _trusted_file(_source_file(type(finder))):
            _flag(f"import hook {type(finder).__name__} was added by the code under test")
    for hook in sys.path_hooks:
        if id(hook) not in path_hooks and not _trusted_file(_source_file(hook)):
            _flag("a path hook was added by the code under test")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # entry-point plugins are loaded by now; no conftest and no code of the repository has run yet
    _baseline(early_config, args)
    yield


_IMPORT_MACHINERY = ("_frozen_importlib", "_frozen_importlib_external", "zipimport", "importlib")


def _trusted_type(cls):
    module = getattr(cls, "__module__", "") or ""
    if module.split(".")[0] in _IMPORT_MACHINERY:
        return True
    return _trusted_file(getattr(sys.modules.get(module), "__file__", None))


def pytest_collection_finish(session):
    _check(session.config, "collection")
    seen = set()
    for item in session.items:
        module = getattr(item, "module", None)
        if module is None or id(module) in seen:
            continue
        seen.add(id(module))
        loader = getattr(getattr(module, "__spec__", None), "loader", None) or getattr(
            module, "__loader__", None
        )
        if loader is None or not _trusted_type(type(loader)):
            _flag(
                f"test module {module.__name__} was loaded by {type(loader).__name__}, not by Python or pytest"
            )


def _status(report):
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "XPASS" if xfail else "PASSED"
        if report.skipped:
            return "XFAIL" if xfail else "SKIPPED"
        return "FAILED"
    if report.failed:
        return "ERROR"
    if report.skipped:
        return "XFAIL" if xfail else "SKIPPED"
    return None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    status = _status(report)
    nodeid = report.nodeid
    try:
        nodeid = item.config.cwd_relative_nodeid(nodeid)
    except Exception:
        pass
    if status is not None:
        _tests.setdefault(nodeid, []).append(status)
    excinfo = getattr(call, "excinfo", None)
    if call.when == "call" and excinfo is not None and report.passed and not hasattr(report, "wasxfail"):
        _flag(f"{nodeid} raised {excinfo.typename} but its report says it passed")


def _pids():
    """Processes of this test run's session (what the run started, daemons that kept the session)."""
    mine = os.getsid(0)
    pids = set()
    try:
        names = _listdir("/proc")
    except OSError:
        return pids
    for name in names:
        if name.isdigit():
            try:
                with _open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 3 and fields[3] == str(mine):
                pids.add(int(name))
    return pids


_PIDS_AT_START = _pids()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    _check(session.config, "the end")
    _state["exitstatus"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The last word: processes the tests started in this session are killed, the result written,
    and the process ends here with the session's exit status, so no code under test (an ``atexit``
    handler, a process left running) runs after the result exists."""
    if "exitstatus" not in _state:
        return  # the session never ran (a usage error): no result, which grades as cut short
    for pid in _pids() - _PIDS_AT_START - {os.getpid()}:
        try:
            _kill(pid, 9)
        except OSError:
            pass
    result = {
        "nonce": _SETTINGS["nonce"],
        "tests": _tests,
        "tampered": _tampered,
        "exitstatus": _state["exitstatus"],
    }
    tmp = _OUT + ".tmp"
    with _open(tmp, "w") as f:
        f.write(_dumps(result))
    _replace(tmp, _OUT)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for stream in (
        getattr(getattr(reporter, "_tw", None), "_file", None),
        sys.stdout,
        sys.stderr,
        sys.__stdout__,
        sys.__stderr__,
    ):
        try:
            stream.flush()
        except Exception:
            pass
    _exit(_state["exitstatus"])
