"""Unit tests of ``march.config`` (and the flag side of ``march.cli``): precedence TOML < env < flags,
type parsing, validation, unknown keys, and the two spellings of dashed names in TOML.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest

from march import cli
from march import config as config_mod
from march.config import OPTIONS, Config, ConfigError, load


def write_toml(tmp_path: Path, text: str, name: str = "march.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_with_nothing_given() -> None:
    assert load(None, {}, {}) == Config()


def test_precedence_toml_then_env_then_flags(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "port = 1001\nmax_clients = 11\ntimeout = 1.5\nmin_batch = 7\n")
    env = {"MARCH_MAX_CLIENTS": "22", "MARCH_TIMEOUT": "2.5"}
    flags = {"timeout": "3.5", "port": None}  # None = flag not given
    c = load(file, env, flags)
    assert c.port == 1001  # TOML only
    assert c.min_batch == 7  # TOML only
    assert c.max_clients == 22  # env beats TOML
    assert c.timeout == 3.5  # flag beats env and TOML
    assert c.max_args == Config().max_args  # nobody set it: default
    assert c.config_file == file


def test_env_beats_defaults_and_flags_beat_env() -> None:
    assert load(None, {"MARCH_PORT": "2002"}, {}).port == 2002
    assert load(None, {"MARCH_PORT": "2002"}, {"port": 3003}).port == 3003
    assert load(None, {"MARCH_PORT": "2002"}, {"port": "3003"}).port == 3003  # argparse gives strings


def test_config_file_from_env(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "port = 4004\n")
    c = load(None, {"MARCH_CONFIG": file}, {})
    assert c.port == 4004
    assert c.config_file == file


def test_unrelated_env_is_ignored() -> None:
    assert load(None, {"MARCH_NOT_AN_OPTION": "x", "PORT": "1", "REDIS_PORT": "2"}, {}) == Config()


@pytest.mark.parametrize("key", ["data-dir", "data_dir"])
def test_data_dir_both_spellings_in_toml(tmp_path: Path, key: str) -> None:
    file = write_toml(tmp_path, f'{key} = "/srv/march"\n')
    assert load(file, {}, {}).data_dir == "/srv/march"


def test_dashed_names_in_toml(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "max-clients = 5\nmax-bulk-len = 2048\nauto-create = false\n")
    c = load(file, {}, {})
    assert (c.max_clients, c.max_bulk_len, c.auto_create) == (5, 2048, False)


def test_toml_sections_are_flattened(tmp_path: Path) -> None:
    file = write_toml(tmp_path, 'bind = "0.0.0.0"\n[limits]\nmax_clients = 9\n[sequences]\nmax_incrby = 10\n')
    c = load(file, {}, {})
    assert (c.bind, c.max_clients, c.max_incrby) == ("0.0.0.0", 9, 10)


def test_unknown_toml_key(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "port = 1\nmax_clientz = 5\n")
    with pytest.raises(ConfigError, match="unknown option 'max_clientz'") as info:
        load(file, {}, {})
    assert file in str(info.value)


def test_unknown_key_in_a_section(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "[limits]\nbogus = 1\n")
    with pytest.raises(ConfigError, match="unknown option 'bogus'"):
        load(file, {}, {})


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load(str(tmp_path / "nope.toml"), {}, {})
    with pytest.raises(ConfigError, match=r"bad\.toml"):
        load(write_toml(tmp_path, "port = = 1\n", "bad.toml"), {}, {})


@pytest.mark.parametrize(
    ("source", "where"),
    [("toml", "config file"), ("env", "MARCH_PORT"), ("flag", "--port")],
)
def test_wrong_type_says_where(tmp_path: Path, source: str, where: str) -> None:
    file = write_toml(tmp_path, 'port = "abc"\n') if source == "toml" else None
    env = {"MARCH_PORT": "abc"} if source == "env" else {}
    flags = {"port": "abc"} if source == "flag" else {}
    with pytest.raises(ConfigError, match="port expects int") as info:
        load(file, env, flags)
    assert where in str(info.value)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("yes", True),
        ("true", True),
        ("1", True),
        ("on", True),
        ("no", False),
        ("False", False),
        ("0", False),
        ("off", False),
    ],
)
def test_bool_spellings(raw: str, expected: bool) -> None:
    assert load(None, {"MARCH_AUTO_CREATE": raw}, {}).auto_create is expected


def test_bad_bool() -> None:
    with pytest.raises(ConfigError, match="auto_create expects bool"):
        load(None, {"MARCH_AUTO_CREATE": "maybe"}, {})


def test_typed_values_from_toml(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "protected_mode = true\ntimeout = 2\nmax_output_buffer = 1_048_576\n")
    c = load(file, {}, {})
    assert c.protected_mode is True
    assert c.timeout == 2.0 and isinstance(c.timeout, float)
    assert c.max_output_buffer == 1 << 20


def test_int_with_underscores_from_env() -> None:
    assert load(None, {"MARCH_MAX_INCRBY": "1_000"}, {}).max_incrby == 1000


def test_bool_is_not_an_int(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="port expects int"):
        load(write_toml(tmp_path, "port = true\n"), {}, {})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"port": 65536}, "port"),
        ({"port": -1}, "port"),
        ({"log_level": "loud"}, "log_level"),
        ({"max_clients": 0}, "max_clients"),
        ({"max_args": 2}, "max_args"),
        ({"max_bulk_len": 1023}, "max_bulk_len"),
        ({"max_inline_len": 10}, "max_inline_len"),
        ({"max_output_buffer": 65535}, "max_output_buffer"),
        ({"timeout": -1.0}, "timeout"),
        ({"min_batch": 0}, "min_batch"),
        ({"min_batch": 10, "max_batch": 9}, "min_batch"),
        ({"batch_interval": 0.0}, "batch_interval"),
        ({"watermark": 0.0}, "watermark"),
        ({"watermark": 1.0}, "watermark"),
        ({"max_wait": 0.0}, "max_wait"),
        ({"store_timeout": 0.0}, "store_timeout"),
        ({"max_incrby": 0}, "max_incrby"),
        ({"max_incrby": 1 << 63}, "max_incrby"),
        ({"max_batch": 1 << 62}, "max_batch"),
        ({"max_wait": float("inf")}, "max_wait"),
        ({"timestamp_max_lead_ms": 0}, "timestamp_max_lead_ms"),
        ({"shutdown_timeout": -1.0}, "shutdown_timeout"),
    ],
)
def test_validation(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config(**changes)  # type: ignore[arg-type]
    env = {"MARCH_" + k.upper(): str(v) for k, v in changes.items()}
    with pytest.raises(ConfigError, match=message):
        load(None, env, {})


def test_limits_at_their_minimum_are_valid() -> None:
    Config(max_args=3, max_bulk_len=1024, max_inline_len=1024, max_output_buffer=65536, max_clients=1, port=0)


def test_config_is_frozen() -> None:
    c = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.port = 1  # type: ignore[misc]
    assert config_mod.with_changes(c, port=1).port == 1
    with pytest.raises(ConfigError):
        config_mod.with_changes(c, port=-5)


def test_public_items() -> None:
    items = Config(requirepass="secret", auto_create=False).public_items()
    assert items["requirepass"] == "********"
    assert items["auto-create"] == "no"
    assert items["data-dir"] == "./data"
    assert set(items) == {o.name.replace("_", "-") for o in OPTIONS}
    assert Config().public_items()["requirepass"] == ""


def test_the_passwords_are_the_secret_options() -> None:
    """``secret`` options are masked by CONFIG GET and redacted from the log (``Config.secrets``)."""
    assert {o.name for o in OPTIONS if o.secret} == {"requirepass", "etcd_password", "cluster_secret"}
    c = Config(requirepass="rp-secret", etcd="127.0.0.1:2379", etcd_user="u", etcd_password="etcd-secret")
    assert c.secrets() == ("rp-secret", "etcd-secret")
    assert c.public_items()["etcd-password"] == "********"
    assert Config().secrets() == ()


def test_every_option_is_a_config_field_and_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    fields = {f.name for f in dataclasses.fields(Config)} - {"config_file"}
    assert {o.name for o in OPTIONS} == fields
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--help"])
    help_text = capsys.readouterr().out
    for o in OPTIONS:
        assert "--" + o.name.replace("_", "-") in help_text


def test_serve_help_shows_booleans_as_config_get_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: True)" not in help_text and "(default: False)" not in help_text
    assert "(default: yes)" in help_text and "(default: no)" in help_text


def test_cli_flags_reach_the_config() -> None:
    args = cli.build_parser().parse_args(["serve", "--data-dir", "/d", "--max-clients", "3", "--auto-create", "no"])
    flags = {o.name: getattr(args, o.name) for o in OPTIONS}
    c = load(None, {"MARCH_MAX_CLIENTS": "7"}, flags)
    assert (c.data_dir, c.max_clients, c.auto_create) == ("/d", 3, False)


def test_cli_bad_value_exits_2(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("MARCH_")]:
        monkeypatch.delenv(name)
    assert cli.main(["serve", "--port", "abc"]) == 2
    assert "--port" in capsys.readouterr().err
    assert cli.main(["serve", "--max-args", "1"]) == 2
    assert "max_args" in capsys.readouterr().err


def test_the_example_config_lists_every_option_with_its_default() -> None:
    """config/march.toml is the reference a reader copies: it must not drift from OPTIONS."""
    import tomllib

    path = Path(__file__).resolve().parent.parent / "config" / "march.toml"
    flat: dict[str, object] = {}
    for section_or_key, value in tomllib.loads(path.read_text()).items():
        flat.update(value if isinstance(value, dict) else {section_or_key: value})
    assert sorted(flat) == sorted(o.name for o in OPTIONS)
    for o in OPTIONS:
        assert flat[o.name] == o.default, o.name


def _key_comments(text: str) -> dict[str, list[str]]:
    """Each key of a TOML file and the comment lines right above it (the block up to a blank or
    non-comment line)."""
    out: dict[str, list[str]] = {}
    block: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            block.append(line)
            continue
        if m := re.match(r"([a-z_]+)\s*=", line):
            out[m[1]] = block
        block = []
    return out


def test_the_example_configs_comments_are_the_option_tables() -> None:
    """Above each key, config/march.toml says what OPTIONS says: its help and its range, word for word
    (section prose may come before). A comment of its own once said `0 = no cap` for
    timestamp_max_lead_ms, which refuses 0."""
    comments = _key_comments(REPO_TOML.read_text())
    for o in OPTIONS:
        want = config_mod.toml_comment(o)
        assert comments[o.name][-len(want) :] == want, f"{o.name}: {comments[o.name]} != {want}"


def test_the_option_tables_help_agrees_with_its_bounds() -> None:
    """A help that names a meaning for 0 (`0 = never`, `0 picks a free port`) belongs to an option
    that accepts 0, and every number's range is in its comment (test above)."""
    for o in OPTIONS:
        if re.search(r"\b0 (=|is|picks)|\(0(?![.\d])|-1 = ", o.help):
            assert o.bounds is not None and o.bounds.low <= 0, f"{o.name}: {o.help!r} but {o.bounds}"


# --- live options, CONFIG SET names, CONFIG REWRITE's file rewriting ------------------------------------

REPO_TOML = Path(__file__).resolve().parent.parent / "config" / "march.toml"


def test_every_option_is_live_or_says_why_not() -> None:
    for o in OPTIONS:
        assert o.live or o.restart, o.name
    live = {o.name for o in OPTIONS if o.live}
    # What decides where clients connect, where state lives and who may move the clock: restart only.
    for name in ("bind", "port", "data_dir", "etcd", "node_id", "lease_ttl", "tls_port", "enable_debug_command"):
        assert name not in live, name
    for name in ("min_batch", "max_batch", "max_wait", "max_clients", "timeout", "log_level", "requirepass"):
        assert name in live, name


def test_reference_table_has_a_live_column() -> None:
    lines = config_mod.reference_table().splitlines()
    assert lines[0] == "| option (TOML / env / flag) | default | range | live | meaning |"
    rows = {line.split("`")[1]: line for line in lines[2:]}
    assert "| yes |" in rows["max_batch"] and "| restart |" in rows["bind"]
    assert "| 1 .. 1000000000 |" in rows["max_batch"] and "| - |" in rows["bind"]
    assert "| 100 .. 60000 |" in rows["timestamp_max_lead_ms"]


def test_every_number_has_bounds_that_hold_its_default() -> None:
    for o in OPTIONS:
        if o.type in (int, float):
            assert o.bounds is not None, f"{o.name} has no bounds"
            assert o.bounds.low <= o.default <= o.bounds.high, o.name
            assert o.bounds.why, o.name
        else:
            assert o.bounds is None, o.name


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "1e400"])
@pytest.mark.parametrize("name", ["max_wait", "batch_interval", "store_timeout", "timeout", "watermark"])
def test_floats_must_be_finite_from_every_source(tmp_path: Path, name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} must be a finite number"):
        load(None, {"MARCH_" + name.upper(): raw}, {})
    with pytest.raises(ConfigError, match=f"{name} must be a finite number"):
        load(None, {}, {name: raw})
    with pytest.raises(ConfigError, match=f"{name} must be a finite number"):
        load(write_toml(tmp_path, f"{name} = {raw if raw != '1e400' else 'inf'}\n"), {}, {})
    with pytest.raises(ConfigError, match=f"{name} must be a finite number"):
        Config(**{name: float(raw)})


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("min_batch", 1 << 62, "min_batch must be between 1 and 1000000000"),
        ("max_batch", 1_000_000_001, "max_batch must be between 1 and 1000000000"),
        ("max_incrby", 1 << 40, "max_incrby must be between 1 and 1000000000"),
        ("timestamp_max_lead_ms", 0, "timestamp_max_lead_ms must be between 100 and 60000"),
        ("timestamp_max_lead_ms", 60_001, "timestamp_max_lead_ms must be between 100 and 60000"),
        ("max_wait", 3600.0, "max_wait must be between 0.001 and 60"),
        ("lease_ttl", 61, "lease_ttl must be between 2 and 60"),
    ],
)
def test_bounds_say_the_range_and_why_from_every_source(name: str, value: object, message: str) -> None:
    for build in (
        lambda: Config(**{name: value}),  # type: ignore[arg-type]
        lambda: load(None, {"MARCH_" + name.upper(): str(value)}, {}),
        lambda: load(None, {}, {name: str(value)}),
    ):
        with pytest.raises(ConfigError, match=message) as info:
            build()
        assert "(" in str(info.value)  # the reason comes with it


def test_sequence_settings_share_the_bounds_of_their_options() -> None:
    assert config_mod.setting_bounds("min_batch") == config_mod._BY_NAME["min_batch"].bounds
    assert config_mod.setting_bounds("max_lead") == config_mod._BY_NAME["timestamp_max_lead_ms"].bounds
    assert config_mod.setting_bounds("lookahead") == config_mod._BY_NAME["timestamp_lookahead_ms"].bounds
    assert config_mod.clamp_setting("max_batch", 1 << 62) == config_mod.MAX_BATCH
    assert config_mod.clamp_setting("max_lead", 0) == config_mod.LEAD_MAX_MS  # stored "no cap": the largest cap
    assert config_mod.clamp_setting("max_lead", 5) == config_mod.LEAD_MIN_MS
    assert config_mod.clamp_setting("min_batch", 500) == 500


@pytest.mark.parametrize("name", ["max-batch", "max_batch", "MAX-BATCH", "Max_Batch"])
def test_find_option_spellings(name: str) -> None:
    option = config_mod.find_option(name)
    assert option is not None and option.name == "max_batch"


def test_find_option_redis_alias_and_unknown() -> None:
    option = config_mod.find_option("maxclients")
    assert option is not None and option.name == "max_clients"
    assert config_mod.find_option("config_file") is None  # not an option: where the config was read from
    assert config_mod.find_option("nosuch") is None


def test_toml_values_read_back() -> None:
    import tomllib

    for value in (True, False, 0, 5000, 2.5, 1e-05, float("inf"), "", 'a "quoted" \\ path\n\x7f\tü'):
        assert tomllib.loads("v = " + config_mod.toml_value(value))["v"] == value, value


def test_rewrite_keeps_comments_and_layout(tmp_path: Path) -> None:
    file = tmp_path / "march.toml"
    original = REPO_TOML.read_text()
    file.write_text(original)
    config_mod.rewrite_file(str(file), {"max_batch": 5000, "log_level": "debug", "auto_create": False})
    text = file.read_text()
    assert load(str(file), {}, {}).max_batch == 5000
    assert load(str(file), {}, {}).log_level == "debug" and not load(str(file), {}, {}).auto_create
    # Every line but the three rewritten ones is unchanged, in place.
    before, after = original.splitlines(), text.splitlines()
    assert len(before) == len(after)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [
        ('log_level = "info"', 'log_level = "debug"'),
        ("auto_create = true", "auto_create = false"),
        ("max_batch = 1000000", "max_batch = 5000"),
    ]


def test_rewrite_keeps_inline_comments_and_dashed_keys(tmp_path: Path) -> None:
    file = write_toml(tmp_path, '[limits]\nmax-clients = 10  # our fd limit\nbind = "a#b"  # hash in a string\n')
    config_mod.rewrite_file(file, {"max_clients": 99, "bind": "c#d"})
    assert Path(file).read_text() == '[limits]\nmax-clients = 99  # our fd limit\nbind = "c#d"  # hash in a string\n'


def test_rewrite_adds_missing_options_to_their_section(tmp_path: Path) -> None:
    file = write_toml(tmp_path, "# mine\n[sequences]\nmin_batch = 10\n\n[limits]\nmax_args = 100\n")
    config_mod.rewrite_file(file, {"max_batch": 70, "timeout": 2.5, "worker_ttl": 9})
    text = Path(file).read_text()
    assert text.startswith(
        "# mine\n[sequences]\nmin_batch = 10\nmax_batch = 70\n\n[limits]\nmax_args = 100\ntimeout = 2.5\n"
    )
    assert text.endswith("# CONFIG REWRITE: set at run time\n[workers]\nworker_ttl = 9\n")
    c = load(file, {}, {})
    assert (c.min_batch, c.max_batch, c.max_args, c.timeout, c.worker_ttl) == (10, 70, 100, 2.5, 9)


def test_rewrite_keeps_permissions_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    file = write_toml(tmp_path, 'requirepass = "old"\n')
    os.chmod(file, 0o600)
    config_mod.rewrite_file(file, {"requirepass": "new"})
    assert load(file, {}, {}).requirepass == "new"
    assert os.stat(file).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["march.toml"]


def test_rewrite_follows_a_symlink(tmp_path: Path) -> None:
    real = Path(write_toml(tmp_path, "max_incrby = 5\n", "real.toml"))
    link = tmp_path / "march.toml"
    link.symlink_to(real)
    config_mod.rewrite_file(str(link), {"max_incrby": 6})
    assert link.is_symlink() and load(str(real), {}, {}).max_incrby == 6


def test_rewrite_that_would_break_the_file_changes_nothing(tmp_path: Path) -> None:
    file = write_toml(tmp_path, 'bind = """\nmax_incrby = 5\n"""\n')  # a multi-line string with a key-like line
    before = Path(file).read_text()
    with pytest.raises(ConfigError):
        config_mod.rewrite_file(file, {"max_incrby": 7})
    assert Path(file).read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["march.toml"]


def test_replace_validates_the_whole_config() -> None:
    with pytest.raises(ConfigError, match="min_batch"):
        dataclasses.replace(Config(), min_batch=10, max_batch=5)


def test_address_and_node_name() -> None:
    """One rule for the node's address and id (logs, metrics, the cluster registry's default)."""
    assert Config(bind="0.0.0.0").address(7000) == "127.0.0.1:7000"
    assert Config(bind="10.0.0.5").node_name(7000) == "10.0.0.5:7000"
    assert Config(advertise="march-1:6379").node_name(7000) == "march-1:6379"
    assert Config(advertise="march-1:6379", node_id="n1").node_name(7000) == "n1"


# --- the forwarding port, the link address, the cluster secret's file --------------------------------


_TLS = {"tls_cert_file": "c", "tls_key_file": "k", "tls_auth_clients": "no"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"forward_port": 7481}, "forward_port needs cluster_secret"),
        ({"forward_port": 7381, "port": 7381, "cluster_secret": "s"}, "forward_port must differ"),
        ({"forward_port": 7380, "tls_port": 7380, "cluster_secret": "s", **_TLS}, "forward_port must differ"),
        ({"forward_port": 9121, "metrics_port": 9121, "cluster_secret": "s"}, "forward_port must differ"),
        ({"forward_port": 70000, "cluster_secret": "s"}, "forward_port must be between 0 and 65535"),
        ({"link_address": "march1"}, "link_address must be host:port"),
    ],
)
def test_forward_port_and_link_address_are_checked(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Config(**changes)  # type: ignore[arg-type]


def test_forward_port_with_a_secret_and_a_link_address() -> None:
    c = Config(forward_port=7481, cluster_secret="s", link_address="march1:7379")
    assert (c.forward_port, c.link_address) == (7481, "march1:7379")
    assert c.public_items()["cluster-secret"] == "********"


def test_the_secret_file_is_made_once_and_read_by_every_node(tmp_path: Path) -> None:
    """No file: the first node to start writes a random secret (mode 0600, whole or not at all);
    every later start, of any node given the same file, reads that one."""
    path = tmp_path / "shared" / "cluster-secret"
    env = {"MARCH_CLUSTER_SECRET_FILE": str(path), "MARCH_FORWARD_PORT": "7481"}
    first = load(None, env, {})
    assert len(first.cluster_secret) == 64 and int(first.cluster_secret, 16) >= 0
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["cluster-secret"]  # no temporary file left
    again = load(None, env, {"node_id": "n2"})
    assert again.cluster_secret == first.cluster_secret
    assert first.cluster_secret not in first.public_items().values()
    other = load(None, {"MARCH_CLUSTER_SECRET_FILE": str(tmp_path / "other")}, {})
    assert other.cluster_secret != first.cluster_secret


def test_a_given_secret_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cluster-secret"
    c = load(None, {"MARCH_CLUSTER_SECRET": "mine", "MARCH_CLUSTER_SECRET_FILE": str(path)}, {})
    assert c.cluster_secret == "mine" and not path.exists()
    path.write_text("  from-the-file \n")
    assert load(None, {"MARCH_CLUSTER_SECRET_FILE": str(path)}, {}).cluster_secret == "from-the-file"


@pytest.mark.parametrize("text", ["", "\n", "two\nlines\n"])
def test_a_secret_file_must_hold_one_line(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cluster-secret"
    path.write_text(text)
    with pytest.raises(ConfigError, match="must hold the secret on one line"):
        load(None, {"MARCH_CLUSTER_SECRET_FILE": str(path)}, {})


def test_a_secret_file_that_cannot_be_made_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match=r"cluster_secret_file .*not-a-directory/cluster-secret"):
        load(None, {"MARCH_CLUSTER_SECRET_FILE": str(blocker / "cluster-secret")}, {})
