"""Reading gin files and bindings the way the scripts take them.

`--gin_file=base.gin` names a file in the project's gin/ folder (or any path);
`--gin_bindings='NUM_TRAIN_STEPS=1000'` overrides a macro or a configurable's parameter
after the files. A mistake (an unknown file, configurable or parameter, a syntax error)
is one UserInputError naming the file or binding.
"""

import ast
import codecs
import difflib
import inspect
import os
import re
import tokenize
import unicodedata
from numbers import Integral, Real

import gin
from absl import logging as absl_logging

from electra_tf.errors import UserInputError


def _as_written(value) -> str:
    """A bound value as a gin file writes it: a configurable reference (gin passes the
    function or class, `@pretrainer`) by its name, not "<function build_pretrainer at 0x..>"."""
    if inspect.isfunction(value) or inspect.isclass(value):
        found = gin.config._inverse_lookup(value)  # (gin has no public inverse lookup)
        return f"@{found.name if found else getattr(value, '__name__', value)}"
    return repr(value)


GIN_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gin")


def check_types(scope: str, values: dict, integers=(), numbers=(), flags=(), strings=(),
                may_be_none=(), macros=None) -> None:
    """gin passes a binding's value as written: 'False' (a string, so true), 2.0 or '3'
    where a count is meant would run wrong (pretraining.jit_compile='False' compiled with
    XLA) or fail deep in Keras. Each of `values` ({parameter: value}) named in a kind must
    be of it: a UserInputError naming `scope`.parameter otherwise (and the macro the gin
    files bind it by, `macros` {parameter: MACRO}, first)."""
    for name, value in values.items():
        if value is None and name in may_be_none:
            continue
        wanted = ("an integer" if name in integers and (
                      isinstance(value, bool) or not isinstance(value, Integral))
                  else "a number" if name in numbers and (
                      isinstance(value, bool) or not isinstance(value, Real))
                  else "True or False" if name in flags and not isinstance(value, bool)
                  else "a string" if name in strings and not isinstance(value, str)
                  else None)
        if wanted:
            shown = _as_written(value)
            setting = f"{scope}.{name}={shown}"
            if name in (macros or {}):
                setting = f"{macros[name]}={shown} ({scope}.{name})"
            raise UserInputError(f"{setting} must be {wanted}"
                                 + (" or None" if name in may_be_none else "")
                                 + (" (no quotes)" if isinstance(value, str) else ""))


# Parameters the scripts set (gin's denylist) and where a user sets them instead.
SET_ELSEWHERE = {
    **{f"{scope}.{flag}": f"pass --{flag}" for scope in ("pretraining", "finetuning")
       for flag in ("model_dir", "train_data", "eval_data", "vocab_file", "strategy", "tpu",
                    "seed", "deterministic", "dry_run", "init_checkpoint", "num_trials",
                    "overwrite")},
    "pretrainer.seed": "pass --seed",
    "pretrainer.vocab_size": "it is the vocab file's size (--vocab_file)",
    "optimizer.num_train_steps": "the schedule spans the run: bind NUM_TRAIN_STEPS "
                                 "(fine-tuning: finetuning.num_epochs)",
    "optimizer.restart_at": "two-stage training restarts the schedule at "
                            "pretraining.two_stage_steps",
    "optimizer.aggregate_gradients": "the trainer sets it for its strategy",
}


def resolve(name: str) -> str:
    """A gin file's path: `name` as given if it exists, else `name` inside gin/."""
    if "://" in name:  # gin reads (and includes) local files
        raise UserInputError(f"--gin_file={name}: gin files are read from this machine's "
                             "disk; copy it here (with the files it includes) and pass its "
                             "path")
    if os.path.exists(name):
        return name
    inside = os.path.join(GIN_DIR, name)
    if os.path.exists(inside):
        return inside
    if os.path.exists(inside + ".gin"):
        return inside + ".gin"
    available = sorted(os.path.relpath(os.path.join(d, f), GIN_DIR)
                       for d, _, files in os.walk(GIN_DIR) for f in files if f.endswith(".gin"))
    named = [a for a in available if os.path.basename(a) in (name, name + ".gin")]
    if named:
        raise UserInputError(f"--gin_file={name} not found, here or in {GIN_DIR}; did you "
                             f"mean {' or '.join(named)}?")
    raise UserInputError(f"--gin_file={name} not found, here or in {GIN_DIR}; choose one of "
                         f"{', '.join(available)}, or give a path")


def parse(files: list[str], bindings: list[str]) -> None:
    """Clear gin's config, then read `files` (resolved) and `bindings` in order. The
    configurables must be imported (registered) first."""
    gin.clear_config()
    paths = [os.path.abspath(resolve(f)) for f in files]
    for path in paths:
        _check_text(path)
    # `include 'pretraining.gin'` in our files resolves against the working directory first,
    # then gin's search paths: read from gin/, then (a user's file including another of
    # theirs) the folders of the files given and the working directory. gin logs an error
    # line for each folder that lacks the file before one has it: not shown.
    cwd = os.getcwd()
    searched = []
    for folder in [os.path.dirname(p) for p in paths if not p.startswith(GIN_DIR + os.sep)]:
        searched += [folder] if folder not in searched else []
    searched += [cwd] if cwd not in searched else []
    for path in paths:  # (and the folders of the files theirs include, for theirs)
        _add_include_folders(path, searched)
    for path, name in zip(paths, files):  # a file of theirs that one includes: as given
        for reader in _read_files(path, searched):
            for included in includes(reader, searched):
                if not included.startswith(GIN_DIR + os.sep) and os.path.exists(included):
                    _check_text(included, f"{included} (included by --gin_file={name})")
    ablations = os.path.join(GIN_DIR, "ablations") + os.sep
    # gin/'s size and ablation files that a user's file includes count as given before it
    # (include 'ablations/mlm.gin' then 'tiny.gin' trained ELECTRA, unchecked): (path, label).
    order = []
    for path, name in zip(paths, files):
        if not path.startswith(GIN_DIR + os.sep):
            for included, includer in _included_gin_files(path, name, searched):
                order.append((included, f"{os.path.relpath(included, GIN_DIR)} (included by "
                                         f"{includer})"))
        order.append((path, name))
    for i, (path, name) in enumerate(order):
        if i and _is_size_file(path):
            raise UserInputError(
                f"--gin_file={name} is a size file, which sets up a whole run: give it first "
                f"(after --gin_file={order[i - 1][1]} it sets that file's values back), and "
                "one size file only")
        if path.startswith(ablations) and not any(
                not p.startswith(ablations) for p, _ in order[:i]):
            raise UserInputError(
                f"--gin_file={name} changes a model that a size file sets up (OBJECTIVE, the "
                "generator), so it must come after one, or the size file's values win; give "
                f"e.g. --gin_file=small.gin --gin_file={os.path.relpath(path, GIN_DIR)}")
    labelled, order = order, [path for path, _ in order]
    _check_ablations_agree(labelled)
    _check_includes_unambiguous(paths, searched)
    example = ((os.path.relpath(paths[0], os.path.dirname(GIN_DIR))
                if paths[0].startswith(GIN_DIR + os.sep) else paths[0]) if paths else "gin/")
    prefixes = list(gin.config._LOCATION_PREFIXES)  # (gin has no call to remove one)
    verbosity = absl_logging.get_verbosity()
    os.chdir(GIN_DIR)
    gin.config._LOCATION_PREFIXES.extend(searched)
    absl_logging.set_verbosity(absl_logging.FATAL)
    try:
        for path in paths:
            try:
                gin.parse_config_file(path)
            except RecursionError:
                raise UserInputError(
                    f"--gin_file={path}: its includes go round in a loop (a file includes "
                    "itself, directly or through another); remove the include that closes "
                    "it") from None
            except ImportError as e:
                raise UserInputError(f"--gin_file={path}: {_import_failure(e)}") from None
            except (ValueError, SyntaxError, KeyError, IOError, tokenize.TokenError) as e:
                raise UserInputError(f"--gin_file={path}: " + (
                    _set_elsewhere(e) or _other_script(e) or (
                        f"{_first_line(e).rstrip('.')}; fix the file or the name (see the "
                        "files in gin/)"))) from None
        _check_ablations_kept(order, searched)
        # (where the files were read: an include in a binding is looked up as theirs are)
        bindings = [b.rstrip("\r\n") for b in bindings]  # (a script saved with CRLF ends)
        for binding in bindings:
            _parse_binding(binding, example)
    finally:
        os.chdir(cwd)
        gin.config._LOCATION_PREFIXES[:] = prefixes
        absl_logging.set_verbosity(verbosity)
    _check_macros_defined(example)
    _check_macros_used(paths, bindings, example, searched)
    _check_unscoped()
    _check_generator_bindings_used(bindings, labelled)


def _parse_binding(binding: str, example: str) -> None:
    """gin.parse_config(binding), its errors one UserInputError naming the binding."""
    try:
        gin.parse_config(binding)
    except ImportError as e:
        raise UserInputError(f"--gin_bindings={binding!r}: {_import_failure(e)}") from None
    except (ValueError, SyntaxError, KeyError, IOError, tokenize.TokenError) as e:
        message = _first_line(e)
        literal = "a number, True/False/None, a quoted string ('...'), a list or a %MACRO"
        if message.startswith("malformed node or string"):
            raise UserInputError(
                f"--gin_bindings={binding!r}: the value is not a Python literal; write "
                f"{literal}") from None
        if isinstance(e, (SyntaxError, tokenize.TokenError)):
            # (a line gin cannot parse: not a name to check against the files, as it said)
            odd = "".join(dict.fromkeys(  # digits and quotes of an input method, say
                c for c in binding
                if ord(c) > 127 and not unicodedata.category(c).startswith(("L", "M"))))
            raise UserInputError(
                f"--gin_bindings={binding!r}: {message.rstrip('.')}; write NAME = VALUE, the "
                f"name as the gin files give it, the value {literal}" + (
                    f", in ASCII ({' '.join(odd)} are not: digits and quotes typed by an "
                    "input method or a word processor)" if odd else "")) from None
        hint = _set_elsewhere(e) or _other_script(e)
        if hint:
            raise UserInputError(f"--gin_bindings={binding!r}: {hint}") from None
        raise UserInputError(f"--gin_bindings={binding!r}: {message.rstrip('.')}; check "
                             f"the name against the gin files (e.g. {example})") from None


def _drop(label: str) -> str:
    """How to take out a file `parse` labelled: '--gin_file=NAME', or the include of it in
    the user's file that includes it ('NAME (included by THEIRS)')."""
    included = re.fullmatch(r"(.+) \(included by (.+)\)", label)
    return (f"drop the include of {included.group(1)} from {included.group(2)}" if included
            else f"drop --gin_file={label}")


def _check_generator_bindings_used(bindings: list[str],
                                   files: list[tuple[str, str]]) -> None:
    """A binding or an ablation file (of `files`, (path, label) of those read) that sizes
    the generator of a model without one (BERT's masked LM, a uniform generator) was
    accepted and changed nothing. By the values read: a run's operative_config.gin saying
    OBJECTIVE = 'mlm' then generator_half.gin passed _check_ablations_agree, which compares
    ablation files only (the size files bind it for every model)."""
    objective, uniform = _value("pretrainer.objective"), _value("pretrainer.uniform_generator")
    removed = ("OBJECTIVE='mlm' trains no generator (BERT)" if objective == "mlm"
               else "pretrainer.uniform_generator=True replaces tokens uniformly at random, "
               "without a generator" if uniform is True else None)
    ablations = os.path.join(GIN_DIR, "ablations") + os.sep
    for path, label in files if removed else ():
        if path.startswith(ablations) and any(
                re.fullmatch(r"pretrainer\.generator_(hidden|layers)_fraction", key)
                for key, _ in _bindings_of_file(path)):
            raise UserInputError(f"--gin_file={label} sets the generator's size, but {removed}: "
                                 f"{_drop(label)}")
    for binding in bindings if removed else ():
        for name in re.findall(r"^\s*pretrainer\.(generator_(?:hidden|layers)_fraction)\s*=",
                               binding, re.MULTILINE):
            raise UserInputError(f"--gin_bindings={binding!r} sets the generator's size, but "
                                 f"{removed}: drop it")


def _check_text(path: str, given: str | None = None) -> None:
    """A gin file must be a file of UTF-8 text (gin named a folder "Unable to open file",
    and a checkpoint's .index given by mistake, or a Latin-1 file, was a traceback).
    `given`: how the user gave it (default --gin_file=PATH)."""
    given = given or f"--gin_file={path}"
    if os.path.isdir(path):
        raise UserInputError(f"{given} is a folder; pass a gin file (e.g. "
                             f"{os.path.join(path, 'operative_config.gin')} of a model dir)")
    with open(path, "rb") as f:
        data = f.read(1 << 20)  # (enough to tell: a checkpoint's .data may be gigabytes)
    if data.startswith(b"\xef\xbb\xbf"):
        raise UserInputError(f"{given} begins with a byte-order mark (saved as "
                             "\"UTF-8 with BOM\"), which gin cannot read; save it as UTF-8 "
                             "without one")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data)  # (a character cut at 1 MB: fine)
    except UnicodeDecodeError as e:
        raise UserInputError(f"{given} is not UTF-8 text (byte {e.start}); pass a "
                             "gin file, saved as UTF-8") from None


def _import_failure(error: ImportError) -> str:
    named = error.name or next(iter(re.findall(r"No module named '([^']+)'", str(error))),
                               "a module")
    return (f"it imports {named}, which is not installed here; drop the import (this "
            "project's settings need none)")


_INCLUDE = re.compile(r"""^\s*include\s+(['"])(.+?)\1""", re.MULTILINE)


def _add_include_folders(path: str, searched: list[str], seen=()) -> None:
    """Adds to `searched` the folder of each file of the user's that `path` includes, and
    so on down: a file included from a subfolder finds the files beside it (it was "Unable
    to open file", naming the file given)."""
    if path in seen or path.startswith(GIN_DIR + os.sep) or not os.path.isfile(path):
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        names = [m.group(2) for m in _INCLUDE.finditer(f.read())]
    for name in names:
        if os.path.isfile(os.path.join(GIN_DIR, name)):
            continue  # ours (read first)
        found = next((os.path.join(d, name) for d in ([""] if os.path.isabs(name) else searched)
                      if os.path.isfile(os.path.join(d, name))), None)
        if found:
            folder = os.path.dirname(os.path.abspath(found))
            searched += [folder] if folder not in searched else []
            _add_include_folders(os.path.abspath(found), searched, (*seen, path))


def _check_includes_unambiguous(paths: list[str], searched: list[str]) -> None:
    """An `include 'base.gin'` in a user's file, with a base.gin of theirs beside it (or in
    the working directory) as well as ours in gin/, would read ours (gin/ is searched
    first, for our own files' includes) without a word: refused, naming both."""
    for path in paths:
        if not os.path.isfile(path) or os.path.realpath(path).startswith(
                os.path.realpath(GIN_DIR) + os.sep):
            continue
        with open(path, encoding="utf-8") as f:
            names = [m.group(2) for m in _INCLUDE.finditer(f.read())]
        for name in names:
            ours = os.path.join(GIN_DIR, name)
            if os.path.isabs(name) or not os.path.isfile(ours):
                continue
            theirs = [os.path.join(d, name) for d in searched
                      if os.path.isfile(os.path.join(d, name))
                      and not os.path.samefile(os.path.join(d, name), ours)]
            if theirs:
                raise UserInputError(
                    f"--gin_file={path} includes '{name}', which is both {theirs[0]} and the "
                    f"project's gin/{name} (read first); include yours by its full path, or "
                    "rename it")


def _check_ablations_agree(files: list[tuple[str, str]]) -> None:
    """Ablation files set one study's values each; two that set the same name differently
    (electra_15.gin then mlm.gin, generator_half.gin then sharing_all.gin) would leave the
    last file's value in place without a word. `files`: (path, label) as `parse` gives."""
    ablations = os.path.join(GIN_DIR, "ablations") + os.sep
    bound: dict[str, tuple[str, str]] = {}  # name -> (value, label)
    for path, name in files:  # (a size file after another file is refused before)
        if not path.startswith(ablations):
            continue
        for key, value in _bindings_of(path):
            if key in bound and bound[key][0] != value:
                raise UserInputError(
                    f"--gin_file={name} sets {key} = {value}, which --gin_file="
                    f"{bound[key][1]} set to {bound[key][0]}: they are different studies; "
                    "run one, or bind the value you want with --gin_bindings")
            bound[key] = (value, name)
    # The generator's size, set by one file, with a file that leaves no generator: trained
    # without a word as if unset (and recorded so).
    sized, removed = bound.get("pretrainer.generator_hidden_fraction"), None
    if bound.get("OBJECTIVE", ("",))[0] == "'mlm'":
        removed = (bound["OBJECTIVE"][1], "trains no generator (BERT)")
    elif bound.get("pretrainer.uniform_generator", ("",))[0] == "True":
        removed = (bound["pretrainer.uniform_generator"][1],
                   "replaces tokens uniformly at random, without a generator")
    if sized and removed:
        raise UserInputError(f"--gin_file={sized[1]} sets the generator's size, but "
                             f"--gin_file={removed[0]} {removed[1]}: {_drop(sized[1])}")


def _check_ablations_kept(paths: list[str], searched=()) -> None:
    """A user's file that undoes an ablation file's value (a run's operative_config.gin or a
    copy of a size file after it: OBJECTIVE = 'electra' after mlm.gin; a file that binds
    pretrainer.objective = 'electra' itself, which mlm.gin sets through %OBJECTIVE, before
    or after it) would train another variant without a word (gin/'s size files are refused
    so by _check_ablations_agree). Read after the files, before the bindings, which may."""
    ablations = os.path.join(GIN_DIR, "ablations") + os.sep
    others = [p for p in paths if not p.startswith(ablations)]
    bound = {p: _bindings_of(p, searched) for p in others}
    for path in (p for p in paths if p.startswith(ablations)):
        for key, value in _bindings_of(path):
            try:
                wanted = ast.literal_eval(value)
            except (ValueError, SyntaxError):  # (a reference)
                continue
            # A macro, and the parameters the other files feed it to.
            names = [key] if "." in key else [key] + list(dict.fromkeys(
                k for p in others for k, v in bound[p] if v == f"%{key}"))
            for name in names:
                now = _value(name if "." in name else f"%{name}")
                if now is _UNREADABLE or now == wanted:
                    continue
                culprit = next((p for p in reversed(others) if any(
                    k == name and v != f"%{key}" for k, v in bound[p])), others[-1])
                raise UserInputError(
                    f"--gin_file={culprit} sets {name} = {now!r}, which --gin_file="
                    f"{os.path.relpath(path, GIN_DIR)} sets to {value}"
                    + (f" (as {key})" if name != key else "") + ": drop it from that file (a "
                    "run's operative_config.gin goes before the ablation files), or bind the "
                    "value you want with --gin_bindings")


_UNREADABLE = object()


def _value(name: str):
    """gin's value of a parameter or %MACRO, through the macros it names; _UNREADABLE
    where gin cannot give one."""
    for _ in range(100):  # (a macro naming itself)
        try:
            value = gin.query_parameter(name)
        except ValueError:
            return _UNREADABLE
        if not (isinstance(value, gin.config.ConfigurableReference)
                and value.selector == "gin.macro"):
            return value
        name = "%" + value.scoped_selector.rsplit("/", 1)[0]
    return _UNREADABLE


def _bindings_of(path: str, searched=()) -> list[tuple[str, str]]:
    """(name, value) of the one-line bindings of a gin file and of the files it includes
    (resolved as `includes`), in the order gin reads them."""
    return [pair for file in _read_files(path, searched) for pair in _bindings_of_file(file)]


def _bindings_of_file(path: str) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return [pair for pair in map(_binding, f) if pair]


def _binding(line: str) -> tuple[str, str] | None:
    """(name, value) of a gin line that binds one, else None. (gin takes indented bindings
    too; a line of a multi-line value has no name before its first "=".)"""
    key, equals, value = line.partition("=")
    if equals and _NAME.fullmatch(key.strip()) and not line.lstrip().startswith("#"):
        return key.strip(), value.strip()
    return None


def _read_files(path: str, searched=(), seen=()) -> list[str]:
    """A gin file and those it includes (resolved as `includes`), each after its includes:
    the order gin reads their bindings in (an include comes before the file's own)."""
    if path in seen or not os.path.isfile(path):
        return []
    return [p for included in includes(path, searched)
            for p in _read_files(included, searched, (*seen, path))] + [path]


_NAME = re.compile(r"[A-Za-z_][\w.]*")


def includes(path: str, searched=()) -> list[str]:
    """The paths of the files a gin file includes, resolved as `parse` has gin read them:
    in gin/ first, then in the folders `searched` (a name found nowhere: in gin/)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        names = [m.group(2) for m in _INCLUDE.finditer(f.read())]
    return [_resolve_include(name, searched) for name in names]


def _resolve_include(name: str, searched=()) -> str:
    if os.path.isabs(name):
        return name
    return next((os.path.join(d, name) for d in (GIN_DIR, *searched)  # (a folder: refused)
                 if os.path.exists(os.path.join(d, name))), os.path.join(GIN_DIR, name))


def _included_gin_files(path: str, name: str, searched: list[str], seen=(),
                        bound=False) -> list[tuple[str, str]]:
    """gin/'s size and ablation files that a user's file includes (through their other
    files too), in order, each with the file whose line includes it (`name`, as given, or
    one of theirs it includes); one of them included after bindings of the user's would
    set them back: refused."""
    if path in seen:
        return []  # (a loop: gin's parse says so)
    found = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            include = _INCLUDE.match(line)
            if include is None:
                bound = bound or _binding(line) is not None
                continue
            included = os.path.abspath(_resolve_include(include.group(2), searched))
            if not os.path.isfile(included):
                continue
            if not included.startswith(GIN_DIR + os.sep):
                found += _included_gin_files(included, name, searched, (*seen, path), bound)
            elif _is_size_file(included) or included.startswith(
                    os.path.join(GIN_DIR, "ablations") + os.sep):
                if bound:
                    raise UserInputError(
                        f"--gin_file={name} includes {include.group(2)} after bindings of its "
                        "own, which that file would set back; put the include first")
                found.append((included, path if seen else name))
    return found


def _is_size_file(path: str) -> bool:
    """tiny.gin .. large.gin: the files of gin/ that set up a whole run (they include
    pretraining.gin)."""
    return (os.path.dirname(path) == GIN_DIR
            and os.path.join(GIN_DIR, "pretraining.gin") in includes(path))


def check_sets_a_run(files: list[str]) -> None:
    """Pre-training's gin files must set the run up: with none that binds
    pretraining.num_train_steps (a size file includes gin/pretraining.gin, which binds the
    run's macros), an import's operative_config.gin given alone ran on run_pretraining's
    defaults for what it left unbound, and bindings of the macros were refused as unused."""
    try:
        gin.query_parameter("pretraining.num_train_steps")
    except ValueError:
        given = " ".join(f"--gin_file={name}" for name in files)
        raise UserInputError(
            f"{given} sets up no run (gin/pretraining.gin's settings, NUM_TRAIN_STEPS and the "
            f"others, are unbound); give a size's file first, e.g. --gin_file=small.gin "
            f"{given}") from None


def _check_macros_used(paths: list[str], bindings: list[str], example: str,
                       searched=()) -> None:
    """A macro that no gin file or binding uses (`NUM_TRAIN_STEP=3` for NUM_TRAIN_STEPS, in
    a binding or a file of the user's) is a misspelling gin itself accepts, as the
    definition of a new macro: stop on it, naming the binding or file that defines it,
    instead of running with the value it was meant to change. A macro some file refers to
    (%NAME) is not one, though a binding of the parameter it fed leaves it unused (a run's
    operative_config.gin, or a size file, with pretraining.num_train_steps=5)."""
    config = gin.config._CONFIG  # gin has no public view of the parsed bindings
    defined = {scope for scope, selector in config if selector == "gin.macro"}
    used = {ref.scoped_selector.rsplit("/", 1)[0]
            for ref in gin.config.iterate_references(config)
            if ref.scoped_selector.endswith("/gin.macro")}
    unused = defined - used
    if not unused:
        return
    read = {path for top in paths for path in _read_files(top, searched)}
    texts = list(bindings)
    for path in read:
        with open(path, encoding="utf-8", errors="replace") as f:
            texts.append(f.read())
    unused -= {name for text in texts for name in re.findall(r"%([A-Za-z_]\w*)", text)}
    # Where: the last binding or user's file that defines one.
    where = next(((f"--gin_bindings={binding!r}", name) for binding in reversed(bindings)
                  for name in _MACRO_DEFINED.findall(binding) if name in unused), None)
    where = where or next(((f"--gin_file={file}", key) for path in reversed(paths)
                           for file, key in reversed(_defined_by(path, searched))
                           if key in unused), None)
    if where is None:
        return
    given, name = where
    close = difflib.get_close_matches(name, sorted(used), n=1)
    hint = f"did you mean {close[0]}? " if close else ""
    raise UserInputError(
        f"{given}: no gin file uses the macro {name}; " + (
            f"{hint}the macros in use: {', '.join(sorted(used))} (see {example})"
            if used else "the gin files given use no macros: give a size's file "
            "first (e.g. small.gin, or finetune/small.gin for fine-tuning)"))


# A macro's definition in a binding's text (one may hold several lines): NAME = ...
_MACRO_DEFINED = re.compile(r"^\s*([A-Za-z_]\w*)\s*=", re.MULTILINE)


def _defined_by(path: str, searched=()) -> list[tuple[str, str]]:
    """(file, NAME) of each macro a gin file and the files it includes define, in the order
    gin reads them."""
    return [(file, key) for file in _read_files(path, searched)
            for key, _ in _bindings_of_file(file) if "." not in key]


def _check_macros_defined(example: str) -> None:
    """A %MACRO that a gin file or binding uses but none defines fails only when the run
    calls the configurable (a traceback from gin): stop on it here."""
    config = gin.config._CONFIG
    defined = {scope for scope, selector in config if selector == "gin.macro"}
    for name in sorted(defined):  # X = %Y, Y = %X: a RecursionError when the run read it
        chain = [name]
        while True:
            value = config[chain[-1], "gin.macro"].get("value")
            if not (isinstance(value, gin.config.ConfigurableReference)
                    and value.selector == "gin.macro"):
                break
            chain.append(value.scoped_selector.rsplit("/", 1)[0])
            if chain[-1] in chain[:-1]:
                loop = chain[chain.index(chain[-1]):]
                if len(loop) == 2:
                    raise UserInputError(f"the macro {loop[0]} = %{loop[0]} names itself, so "
                                         "it has no value; give it one")
                raise UserInputError(
                    "the macros " + ", ".join(f"{a} = %{b}" for a, b in zip(loop, loop[1:]))
                    + " go round in a loop, so none has a value; give one of them a value")
            if (chain[-1], "gin.macro") not in config:
                break  # (undefined: said below)
    undefined = list(dict.fromkeys(
        ref.scoped_selector.rsplit("/", 1)[0] for ref in gin.config.iterate_references(config)
        if ref.scoped_selector.endswith("/gin.macro")
        and ref.scoped_selector.rsplit("/", 1)[0] not in defined))
    if len(undefined) > 2:  # (gin/pretraining.gin or finetune/finetuning.gin alone)
        raise UserInputError(
            f"the macros {', '.join('%' + n for n in undefined)} are used but no gin file or "
            "--gin_bindings defines them; give a size's file first (e.g. small.gin, or "
            "finetune/small.gin for fine-tuning), which defines them")
    for name in undefined:
        close = difflib.get_close_matches(name, sorted(defined), n=1)
        hint = f" (did you mean %{close[0]}?)" if close else ""
        raise UserInputError(
            f"%{name}{hint} is used but no gin file or --gin_bindings defines it; define "
            f"it (--gin_bindings='{name}=...') or fix the name (see {example})")


def _check_unscoped() -> None:
    """A scoped binding (`foo/pretrainer.num_layers = 1`) applies only where a configurable
    is called in that scope, which none of this project's is: it changed nothing."""
    for scope, selector in gin.config._CONFIG:
        if selector == "gin.macro" and "/" in scope:
            raise UserInputError(
                f"{scope}: this project calls its configurables in no gin scope, so a scoped "
                f"macro changes nothing; drop '{scope.rsplit('/', 1)[0]}/'")
        if scope and selector != "gin.macro":
            name = selector.rsplit(".", 1)[-1]
            parameter = next(iter(gin.config._CONFIG[scope, selector]), "")
            raise UserInputError(
                f"{scope}/{name}.{parameter}: this project calls its configurables in no gin "
                f"scope, so a scoped binding changes nothing; drop '{scope}/'")


# The configurables only one script reads: a binding of one in the other script would be
# accepted (where both are registered) and change nothing.
_READ_ONLY_BY = {"pretraining": "pre-training", "pretrainer": "pre-training",
                 "finetuning": "fine-tuning"}
_WHY_NOT = {"fine-tuning": (" (it builds the model the checkpoint's model_info.json "
                            "describes)", " (fine-tuning's own: gin/finetune/, finetuning.*)"),
            "pre-training": (" (run_finetuning.py does)", "")}


def check_read_by(script: str) -> None:
    """Refuses a binding of a configurable `script` ("pre-training", "fine-tuning") does not
    read: pretrainer.dropout_rate in fine-tuning, finetuning.head_dropout in pre-training."""
    for scope, selector in gin.config._CONFIG:
        name = selector.rsplit(".", 1)[-1]
        if _READ_ONLY_BY.get(name, script) != script:
            parameter = next(iter(gin.config._CONFIG[scope, selector]), "")
            raise UserInputError(
                f"{name}.{parameter} is a {_READ_ONLY_BY[name]} setting, which {script} does "
                f"not read{_WHY_NOT[script][0]}; drop it{_WHY_NOT[script][1]}")


def check_finetuning_files(files: list[str]) -> None:
    """Fine-tuning given pre-training's files of gin/ (tiny.gin for finetune/tiny.gin, an
    ablation) was refused by the first pre-training binding in them, not by the file."""
    for name in files:
        path = os.path.abspath(resolve(name))
        if (_is_size_file(path) or path == os.path.join(GIN_DIR, "pretraining.gin")
                or path.startswith(os.path.join(GIN_DIR, "ablations") + os.sep)):
            ours = os.path.join("finetune", os.path.basename(path))
            example = ours if os.path.exists(os.path.join(GIN_DIR, ours)) else "finetune/small.gin"
            raise UserInputError(f"--gin_file={name} sets up pre-training; fine-tuning's files "
                                 f"are in gin/finetune/ (e.g. --gin_file={example})")


def _other_script(error: Exception) -> str | None:
    """For gin's "No configurable matching 'finetuning'" in pre-training (which does not
    register fine-tuning's configurable): whose setting it is; None for other errors."""
    match = re.search(r"No configurable matching '(\w+)'", str(error))
    if match and match[1] == "finetuning":
        return ("finetuning.* are fine-tuning settings, which pre-training does not read"
                f"{_WHY_NOT['pre-training'][0]}; drop it")
    return None


def _set_elsewhere(error: Exception) -> str | None:
    """For gin's "Configurable 'optimizer' has denylisted kwarg 'num_train_steps'": what to
    do instead; None for other errors."""
    match = re.search(r"Configurable '([\w.]+)' has denylisted kwarg '(\w+)'", str(error))
    if not match:
        return None
    name = f"{match[1]}.{match[2]}"
    return f"{name} is not set by gin; " + SET_ELSEWHERE.get(name, "the run sets it itself")


def _first_line(error: Exception) -> str:
    if isinstance(error, tokenize.TokenError):  # ('EOF in multi-line statement', (2, 0))
        return "a bracket or quote is not closed"
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__
