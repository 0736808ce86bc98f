//! The script protocol's test vectors (`lua/clients/vectors.json`, quoted by
//! `lua/README.md` and read by the Python and Node clients' tests) are what
//! this implementation computes: every algorithm's parameters, capacity,
//! longest wait and key fingerprint for a few quotas, and the Redis key of
//! awkward user keys. The file is compared byte for byte with the one
//! generated here; `RATELAB_BLESS=1` rewrites it after a deliberate change of
//! the protocol.
//!
//! Also: each algorithm's script is the prologue followed by the file the
//! vectors name, and a call of another protocol version gets a clear error.

use std::fmt::Write as _;
use std::path::PathBuf;

use ratelab::redis::{MAX_KEY_LEN, MAX_TTL_SLACK_MS, PROTOCOL_VERSION, RedisAlgorithm, redis_key};
use ratelab::{AlgorithmKind, AlgorithmVisitor, KnownAlgorithm, Quota};
use ratelab_testkit::redis::RedisServer;

fn lua_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../lua")
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
                 \"fingerprint_input\": \"v2:{}:{}\", \"key_suffix\": \"{}\"}}",
                kind.name(),
                e.code,
                e.script_file,
                join(&e.params),
                e.capacity,
                e.max_wait,
                e.debt,
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
    let path = lua_dir().join("clients/vectors.json");
    let expected = vectors();
    if std::env::var_os("RATELAB_BLESS").is_some() {
        std::fs::write(&path, &expected).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    if committed != expected {
        let line = committed
            .lines()
            .zip(expected.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(committed.lines().count().min(expected.lines().count()));
        panic!(
            "{} differs from what Rust computes (first at line {}); \
             after a deliberate protocol change, rerun with RATELAB_BLESS=1\n\
             committed: {:?}\ncomputed:  {:?}",
            path.display(),
            line + 1,
            committed.lines().nth(line),
            expected.lines().nth(line),
        );
    }
}

#[test]
fn each_script_is_the_prologue_and_its_file() {
    let read = |file: &str| std::fs::read_to_string(lua_dir().join(file)).unwrap();
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
        call(Some("4")).unwrap(),
        [1, 10, 9, 0, 200_000, 0, 1_200_000, 0]
    );
    // A version no script knows, the older ones (their keys hold state in
    // formats these scripts do not read), an empty one, and the layout
    // before the version argument (now first).
    for (version, got) in [
        (Some("999"), "999"),
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
