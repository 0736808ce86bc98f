//! The script protocol's files for the other languages are what this
//! implementation computes, byte for byte:
//!
//! - `lua/clients/vectors.json` (test vectors, quoted by `lua/README.md` and
//!   checked by the Python and Node clients' tests): every algorithm's
//!   parameters, capacity, longest wait and key fingerprint for a few
//!   quotas, and the Redis key of awkward user keys;
//! - `lua/clients/algorithms.json` (the spec the Python and Node clients
//!   read at run time): each algorithm's name, key code, script file, which
//!   of a quota's quantities its parameters and longest wait are (inferred
//!   here from what its remote form computes on several quotas), whether it
//!   is a debt, and the largest burst a store keeps;
//! - the reference quota's table in `lua/README.md`, and a row for every
//!   algorithm in its scripts and State tables; a link in `lua/` to every
//!   algorithm's script.
//!
//! `just regenerate` (`RATELAB_BLESS=1`) rewrites the files, the table and
//! the links after a deliberate change, such as a new algorithm.
//!
//! Also: each algorithm's script is the prologue followed by the file the
//! vectors name, and a call of another protocol version gets a clear error.

use std::fmt::Write as _;
use std::path::PathBuf;

use ratelab::redis::{MAX_KEY_LEN, MAX_TTL_SLACK_MS, PROTOCOL_VERSION, redis_key};
use ratelab::toolkit::remote::STATE_FORMAT;
use ratelab::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, Quota};
use ratelab_testkit::redis::RedisServer;

fn lua_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../lua")
}

fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn bless() -> bool {
    std::env::var_os("RATELAB_BLESS").is_some()
}

/// Compares `path` with `expected`, after writing it when blessing.
fn compare_file(path: &std::path::Path, expected: &str) {
    if bless() {
        std::fs::write(path, expected).unwrap();
    }
    let committed = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    if committed != expected {
        let line = committed
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(expected.lines().count()));
        panic!(
            "{} differs from what Rust computes (first at line {}); \
             after a deliberate change (a new algorithm, a protocol change), run `just regenerate`\n\
             committed: {:?}\ncomputed:  {:?}",
            path.display(),
            line + 1,
            committed.lines().nth(line),
            expected.lines().nth(line),
        );
    }
}

/// (limit, period in µs, burst): the reference quota, a slow one, one whose
/// emission interval rounds up, and one whose sliding counter steps round.
const QUOTAS: [(u32, u64, u32); 4] = [
    (5, 1_000_000, 10),
    (10, 60_000_000, 10),
    (7, 3_000_000, 3),
    (1_000, 3_600_000_000, 1_000),
];

/// What the protocol needs to know of one algorithm on one quota.
struct Entry {
    code: &'static str,
    script_file: &'static str,
    params: Vec<u64>,
    capacity: u64,
    max_wait: u64,
    debt: bool,
    key_suffix: String,
    source: String,
    max_stored_burst: Option<(u32, &'static str)>,
}

struct Describe;

impl AlgorithmVisitor for Describe {
    type Output = Entry;

    fn visit<A: KnownAlgorithm>(self, a: A) -> Entry {
        Entry {
            code: A::CODE,
            script_file: A::SCRIPT_FILE,
            params: a.params().to_vec(),
            capacity: a.capacity(),
            max_wait: a.max_wait_micros(),
            debt: A::DEBT,
            key_suffix: a.key_suffix(),
            source: A::script(),
            max_stored_burst: A::MAX_STORED_BURST,
        }
    }
}

fn json_string(bytes: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(bytes).ok()?;
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => write!(out, "\\u{:04x}", u32::from(c)).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn join(numbers: &[u64]) -> String {
    numbers
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The user keys of the key vectors: plain, braces, the escape character,
/// what an escaped or hashed key looks like, binary, UTF-8, and lengths
/// around the hashing threshold.
fn user_keys() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        &b"alice"[..],
        b"client-42",
        b"",
        b"%",
        b"{",
        b"}",
        b"{}",
        b"a}b{c",
        b"%7B",
        b"%H",
        b"user:{42}:login",
        b"ip:2001:db8::1",
        "caf\u{e9} \u{1f600}".as_bytes(),
        b"tab\there \"quoted\" back\\slash",
        &[0xff, 0x00, b'}', 0x80],
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect();
    keys.push(vec![b'a'; MAX_KEY_LEN]);
    keys.push(vec![b'a'; MAX_KEY_LEN + 1]);
    keys.push(vec![b'{'; MAX_KEY_LEN]);
    keys.push(vec![b'{'; MAX_KEY_LEN + 1]);
    keys.push((0..=255u8).collect());
    keys
}

/// The vectors file, as this implementation computes it.
fn vectors() -> String {
    let mut out = String::new();
    writeln!(out, "{{").unwrap();
    writeln!(out, "  \"protocol_version\": {PROTOCOL_VERSION},").unwrap();
    writeln!(out, "  \"max_key_len\": {MAX_KEY_LEN},").unwrap();
    writeln!(out, "  \"max_ttl_slack_ms\": {MAX_TTL_SLACK_MS},").unwrap();
    writeln!(out, "  \"algorithms\": [").unwrap();
    let mut rows = Vec::new();
    let mut reference_suffix = String::new();
    for kind in AlgorithmKind::ALL {
        for &(limit, period, burst) in &QUOTAS {
            let quota = Quota::new(limit, std::time::Duration::from_micros(period))
                .and_then(|q| q.with_burst(burst))
                .unwrap();
            let e = kind.visit(quota, Describe);
            if kind == AlgorithmKind::Gcra && (limit, period, burst) == QUOTAS[0] {
                reference_suffix = e.key_suffix.clone();
            }
            rows.push(format!(
                "    {{\"algorithm\": \"{}\", \"code\": \"{}\", \"script\": \"{}\", \
                 \"quota\": {{\"limit\": {limit}, \"period_us\": {period}, \"burst\": {burst}}}, \
                 \"params\": [{}], \"capacity\": {}, \"max_wait_us\": {}, \"debt\": {}, \
                 \"fingerprint_input\": \"{}:{}:{}\", \"key_suffix\": \"{}\"}}",
                kind.name(),
                e.code,
                e.script_file,
                join(&e.params),
                e.capacity,
                e.max_wait,
                e.debt,
                STATE_FORMAT,
                e.code,
                join(&e.params),
                e.key_suffix,
            ));
        }
    }
    writeln!(out, "{}", rows.join(",\n")).unwrap();
    writeln!(out, "  ],").unwrap();
    writeln!(out, "  \"keys\": [").unwrap();
    let mut rows = Vec::new();
    let prefixes = ["ratelab", "", "app{1}:v%2"];
    for (i, prefix) in prefixes.iter().enumerate() {
        for key in user_keys() {
            // Every key under the default prefix; a few under the others.
            if i > 0 && key.len() > 8 {
                continue;
            }
            let suffix = &reference_suffix;
            let redis = redis_key(prefix, &key, suffix);
            let mut row = format!(
                "    {{\"prefix\": {}, \"key_hex\": \"{}\", \"suffix\": \"{suffix}\", \
                 \"redis_key_hex\": \"{}\"",
                json_string(prefix.as_bytes()).unwrap(),
                hex(&key),
                hex(&redis),
            );
            if let (Some(k), Some(r)) = (json_string(&key), json_string(&redis)) {
                write!(row, ", \"key\": {k}, \"redis_key\": {r}").unwrap();
            }
            row.push('}');
            rows.push(row);
        }
    }
    writeln!(out, "{}", rows.join(",\n")).unwrap();
    writeln!(out, "  ]").unwrap();
    writeln!(out, "}}").unwrap();
    out
}

#[test]
fn the_vectors_file_is_what_rust_computes() {
    compare_file(&lua_dir().join("clients/vectors.json"), &vectors());
}

/// A quota's quantities the clients compute (`lua/README.md`, "From a
/// quota to the parameters"), by name: what `algorithms.json` says each
/// algorithm's parameters and longest wait are.
const QUANTITIES: [(&str, &str); 6] = [
    ("burst", "the burst: the capacity of every algorithm"),
    ("interval", "T = ceil(period / limit), µs"),
    ("tolerance", "burst × T, µs"),
    ("window", "W = ceil(period × burst / limit), µs"),
    ("window_step", "ceil(W / max_steps), µs"),
    ("window_steps", "ceil(W / window_step)"),
];

/// The sliding counter's steps per window, at most: `window_step`'s divisor.
const MAX_STEPS: u64 = 1 << 16;

/// [`QUANTITIES`] of `quota`, in that order.
fn quantities(quota: &Quota) -> [u64; 6] {
    let burst = u64::from(quota.burst());
    let interval = quota.emission_interval_micros();
    let window = quota.window_micros();
    let step = window.div_ceil(MAX_STEPS);
    [
        burst,
        interval,
        burst * interval,
        window,
        step,
        window.div_ceil(step),
    ]
}

/// The quotas the spec's quantities are inferred on: the vectors' and a few
/// more, so that no two quantities agree on all of them by chance.
fn inference_quotas() -> Vec<Quota> {
    let mut quotas: Vec<(u32, u64, u32)> = QUOTAS.to_vec();
    quotas.extend([(3, 10_000_001, 7), (13, 1_000_003, 1), (6, 6_000_000, 9)]);
    quotas
        .into_iter()
        .map(|(limit, period, burst)| {
            Quota::new(limit, std::time::Duration::from_micros(period))
                .and_then(|q| q.with_burst(burst))
                .unwrap()
        })
        .collect()
}

/// What `algorithms.json` says of `kind`, as JSON: the quantities its
/// parameters and longest wait are inferred from what it computes on
/// [`inference_quotas`].
fn spec_row(kind: AlgorithmKind) -> String {
    let built: Vec<(Entry, [u64; 6])> = inference_quotas()
        .iter()
        .map(|q| (kind.visit(*q, Describe), quantities(q)))
        .collect();
    let e = &built[0].0;
    let name = kind.name();
    // Each parameter: the one quantity it equals on every quota.
    let params: Vec<String> = (0..e.params.len())
        .map(|i| {
            let matching: Vec<&str> = (0..QUANTITIES.len())
                .filter(|&k| built.iter().all(|(e, q)| e.params[i] == q[k]))
                .map(|k| QUANTITIES[k].0)
                .collect();
            match matching[..] {
                [one] => format!("\"{one}\""),
                [] => panic!(
                    "{name}: parameter {} is none of the quantities the clients compute \
                     ({QUANTITIES:?}): add one here and in lua/clients (protocol.py, protocol.ts)",
                    i + 1
                ),
                _ => panic!(
                    "{name}: parameter {} is any of {matching:?}: add a quota to \
                     inference_quotas that tells them apart",
                    i + 1
                ),
            }
        })
        .collect();
    // The longest wait: a small multiple of one quantity.
    let waits: Vec<(&str, u64)> = (0..QUANTITIES.len())
        .flat_map(|k| (1..=4).map(move |times| (k, times)))
        .filter(|&(k, times)| built.iter().all(|(e, q)| e.max_wait == times * q[k]))
        .map(|(k, times)| (QUANTITIES[k].0, times))
        .collect();
    let [(of, times)] = waits[..] else {
        panic!(
            "{name}: its longest wait is {waits:?} of the quantities the clients compute, not one"
        );
    };
    for (e, q) in &built {
        assert_eq!(
            e.capacity, q[0],
            "{name}: the clients take the capacity to be the burst"
        );
    }
    let (max_burst, unsupported) = match e.max_stored_burst {
        Some((max, why)) => (max.to_string(), json_string(why.as_bytes()).unwrap()),
        None => ("null".to_owned(), "null".to_owned()),
    };
    format!(
        "    {{\"name\": \"{name}\", \"code\": \"{}\", \"script\": \"{}\", \"params\": [{}], \
         \"capacity\": \"burst\", \"max_wait\": {{\"of\": \"{of}\", \"times\": {times}}}, \
         \"debt\": {}, \"max_burst\": {max_burst}, \"unsupported\": {unsupported}}}",
        e.code,
        e.script_file,
        params.join(", "),
        e.debt,
    )
}

/// `lua/clients/algorithms.json`, as this implementation computes it.
fn spec() -> String {
    let mut out = String::new();
    writeln!(out, "{{").unwrap();
    writeln!(out, "  \"protocol_version\": {PROTOCOL_VERSION},").unwrap();
    writeln!(out, "  \"state_format\": \"{STATE_FORMAT}\",").unwrap();
    writeln!(out, "  \"max_steps\": {MAX_STEPS},").unwrap();
    writeln!(out, "  \"quantities\": {{").unwrap();
    let quantities: Vec<String> = QUANTITIES
        .iter()
        .map(|(name, what)| format!("    \"{name}\": {}", json_string(what.as_bytes()).unwrap()))
        .collect();
    writeln!(out, "{}", quantities.join(",\n")).unwrap();
    writeln!(out, "  }},").unwrap();
    writeln!(out, "  \"algorithms\": [").unwrap();
    let rows: Vec<String> = AlgorithmKind::ALL.into_iter().map(spec_row).collect();
    writeln!(out, "{}", rows.join(",\n")).unwrap();
    writeln!(out, "  ]").unwrap();
    writeln!(out, "}}").unwrap();
    out
}

#[test]
fn the_algorithms_spec_is_what_rust_computes() {
    compare_file(&lua_dir().join("clients/algorithms.json"), &spec());
}

/// `lua/` holds each algorithm's script, a link to the file in its crate
/// (made by `just regenerate` for a new one), and `lua/README.md` has its
/// rows: in the scripts table, in the State table, and (generated) in the
/// reference quota's table.
/// `lua/<file>`, a link to the algorithm crate's `lua/<file>`, made when
/// blessing if it is missing (every test that reads `lua/` makes sure of it
/// first: they run in parallel).
fn link_scripts() {
    struct File;
    impl AlgorithmVisitor for File {
        type Output = &'static str;
        fn visit<A: KnownAlgorithm>(self, _: A) -> &'static str {
            A::SCRIPT_FILE
        }
    }
    if !bless() {
        return;
    }
    for kind in AlgorithmKind::ALL {
        let file = kind.visit(Quota::per_second(1).unwrap(), File);
        let link = lua_dir().join(file);
        if link.exists() {
            continue;
        }
        let crate_dir = std::fs::read_dir(repo_dir().join("crates"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .find(|dir| dir.join("lua").join(file).is_file())
            .unwrap_or_else(|| panic!("{kind}: no crates/*/lua/{file}"));
        let target = PathBuf::from("../crates")
            .join(crate_dir.file_name().unwrap())
            .join("lua")
            .join(file);
        #[cfg(unix)]
        match std::os::unix::fs::symlink(&target, &link) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                panic!("cannot link {}: {e}", link.display())
            }
            _ => {}
        }
    }
}

#[test]
fn lua_holds_every_algorithm_s_script_and_its_rows() {
    link_scripts();
    struct File;
    impl AlgorithmVisitor for File {
        type Output = (&'static str, &'static str, &'static str);
        fn visit<A: KnownAlgorithm>(self, _: A) -> Self::Output {
            (A::NAME, A::CODE, A::SCRIPT_FILE)
        }
    }
    let quota = Quota::per_second(1).unwrap();
    let readme_path = lua_dir().join("README.md");
    let mut readme = std::fs::read_to_string(&readme_path).unwrap();
    let reference = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    let mut missing = Vec::new();
    let mut previous: Option<&str> = None;
    for kind in AlgorithmKind::ALL {
        let (name, code, file) = kind.visit(quota, File);
        let link = lua_dir().join(file);
        if !link.is_file() {
            missing.push(format!(
                "{name}: lua/{file}, a link to its crate's lua/{file}"
            ));
        }
        if !readme.contains(&format!("\n| `{name}` | `{code}` | `{file}` |")) {
            missing.push(format!("{name}: its row in lua/README.md's scripts table (\"| `{name}` | `{code}` | `{file}` | ...\")"));
        }
        if !readme.contains(&format!("\n| {name} | string,"))
            && !readme.contains(&format!("\n| {name} | sorted set |"))
        {
            missing.push(format!(
                "{name}: its row in lua/README.md's State table (\"| {name} | string, ...\")"
            ));
        }
        let e = kind.visit(reference, Describe);
        let params = e.params.iter().map(u64::to_string).collect::<Vec<_>>();
        let row = format!(
            "| {name} | `{}` | `{STATE_FORMAT}:{code}:{}` | `{}` |",
            params.join(" "),
            params.join(","),
            e.key_suffix
        );
        let start = format!("\n| {name} | `");
        match readme.find(&start) {
            Some(at) => {
                let line_start = at + 1;
                let end = readme[line_start..]
                    .find('\n')
                    .map_or(readme.len(), |e| line_start + e);
                if readme[line_start..end] != row {
                    if bless() {
                        readme.replace_range(line_start..end, &row);
                    } else {
                        missing.push(format!("{name}: {row} in lua/README.md's reference table"));
                    }
                }
            }
            // A new algorithm's row goes after the one listed before it.
            None if bless() && previous.is_some() => {
                let after = format!("\n| {} | `", previous.unwrap_or_default());
                let at = readme.find(&after).expect("the previous algorithm's row") + 1;
                let end = readme[at..].find('\n').map_or(readme.len(), |e| at + e);
                readme.insert_str(end, &format!("\n{row}"));
            }
            None => missing.push(format!("{name}: {row} in lua/README.md's reference table")),
        }
        previous = Some(name);
    }
    if bless() {
        std::fs::write(&readme_path, readme).unwrap();
    }
    assert!(
        missing.is_empty(),
        "missing: {} (`just regenerate` makes the links and the reference rows)",
        missing.join("; ")
    );
}

#[test]
fn each_script_is_the_prologue_and_its_file() {
    link_scripts();
    let read = |file: &str| {
        std::fs::read_to_string(lua_dir().join(file)).unwrap_or_else(|e| {
            panic!("lua/{file}: {e} (`just regenerate` links a new algorithm's)")
        })
    };
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    for kind in AlgorithmKind::ALL {
        let e = kind.visit(quota, Describe);
        assert_eq!(
            e.source,
            read("prologue.lua") + &read(e.script_file),
            "{kind}"
        );
    }
}

#[test]
fn another_protocol_version_is_a_clear_error() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_connection().unwrap();
    let quota = Quota::per_second(5).unwrap().with_burst(10).unwrap();
    let e = AlgorithmKind::Gcra.visit(quota, Describe);
    let mut call = |version: Option<&str>| -> redis::RedisResult<Vec<i64>> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(&e.source).arg(1).arg("ratelab:{v}:gcra");
        if let Some(version) = version {
            cmd.arg(version);
        }
        // Then now, cost, slack, deadline, the operation and the parameters.
        cmd.arg(1_000_000).arg(1).arg(0).arg("").arg("check");
        cmd.arg(&e.params[..]);
        cmd.query(&mut connection)
    };
    // Admitted, with its stamp: the TAT after it, and the ledger.
    assert_eq!(
        call(Some("5")).unwrap(),
        [1, 10, 9, 0, 200_000, 0, 1_200_000, 0]
    );
    // A version no script knows, the older ones (their keys hold state in
    // formats these scripts do not read), an empty one, and the layout
    // before the version argument (now first).
    for (version, got) in [
        (Some("999"), "999"),
        (Some("4"), "4"),
        (Some("3"), "3"),
        (Some("1"), "1"),
        (Some(""), "\"\""),
        (None, "1000000"),
    ] {
        let error = call(version).unwrap_err();
        // Redis splits an error reply at its first space: code and detail.
        assert_eq!(error.code(), Some("ratelab:"), "{error}");
        let detail = error.detail().unwrap_or_default();
        assert!(
            detail.starts_with("protocol version ")
                && detail.contains(&PROTOCOL_VERSION.to_string())
                && detail.ends_with(&format!(" expected, got {got}")),
            "{error}"
        );
    }
    // Nothing was written by the refused calls: the one admitted unit only
    // (the TAT, the ledger and the instant written, as little-endian
    // doubles).
    let state: Vec<u8> = redis::cmd("GET")
        .arg("ratelab:{v}:gcra")
        .query(&mut connection)
        .unwrap();
    let doubles: Vec<f64> = state
        .chunks(8)
        .map(|d| f64::from_le_bytes(d.try_into().unwrap()))
        .collect();
    assert_eq!(doubles, [1_200_000.0, 0.0, 1_000_000.0]);
}
