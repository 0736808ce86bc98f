//! The scenarios and the report, end to end: deterministic output, the
//! article's figures on both backends, the window edge, every chart,
//! section and well-formed table, and clear CLI errors.

use std::process::{Command, Stdio};

use ratelab_compare::backend::RedisEnv;
use ratelab_compare::scenario::failover::Case;
use ratelab_compare::scenario::window_edge::WindowEdge;
use ratelab_compare::{Config, ScenarioName, report};
use ratelab_testkit::redis::RedisServer;

mod tables;

fn simulated_only(seed: u64) -> Config {
    Config {
        scenarios: vec![
            ScenarioName::Reference,
            ScenarioName::WindowEdge,
            ScenarioName::LoadBalancer,
            ScenarioName::Traffic,
            ScenarioName::Smoothness,
            // The flood's decisions reproduce too (in separate processes,
            // below); its heap bytes, in the guide, count every test thread.
            ScenarioName::LightTraffic,
        ],
        ..Config::quick(seed)
    }
}

#[test]
fn deterministic_scenarios_give_the_same_output_twice() {
    let first = ratelab_compare::run_blocking(&simulated_only(7), None).unwrap();
    let second = ratelab_compare::run_blocking(&simulated_only(7), None).unwrap();
    assert_eq!(first.deterministic_json(), second.deterministic_json());
    // The window edge through ratelab-server ran on the real clock: its
    // rows are in the results, not in what must reproduce.
    assert!(!first.window_edge.as_ref().unwrap().server_rows.is_empty());
    assert!(!first.deterministic_json().contains("server_rows"));
    let other = ratelab_compare::run_blocking(&simulated_only(8), None).unwrap();
    assert_ne!(first.deterministic_json(), other.deterministic_json());
    // The generated guide is part of what must reproduce.
    assert_eq!(report::guide(&first), report::guide(&second));
}

/// The flood's decisions as separate runs of the binary wrote them, one
/// per seed, the processes side by side: each process hashes keys its own
/// way unless the seed fixes it.
fn flood_decisions(seeds: &[&str]) -> Vec<Vec<String>> {
    let runs: Vec<_> = seeds
        .iter()
        .map(|seed| {
            let dir = tempfile::tempdir().unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_ratelab-compare"))
                .args(["--scenario", "flood", "--no-redis", "--quick", "--quiet"])
                .args(["--seed", seed, "-o"])
                .arg(dir.path())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (dir, child)
        })
        .collect();
    runs.into_iter()
        .map(|(dir, child)| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{out:?}");
            let csv = std::fs::read_to_string(dir.path().join("data").join("flood.csv")).unwrap();
            // Every column but the last (heap bytes, measured rather than
            // simulated).
            csv.lines()
                .map(|l| l.rsplit_once(',').unwrap().0.to_owned())
                .collect()
        })
        .collect()
}

#[test]
fn the_same_seed_floods_alike_in_separate_processes() {
    let runs = flood_decisions(&["42", "42", "7"]);
    assert!(runs[0].len() > 10, "{:?}", runs[0]);
    assert_eq!(runs[0], runs[1]);
    assert_ne!(runs[0], runs[2], "another seed, other cells");
}

#[test]
fn figures_not_from_this_clean_commit_are_said_loudly() {
    use ratelab_compare::scenario::cost::{BenchOrigin, Cost};
    let title = "## ⚠ Not all of this report is this commit's";
    let mut results = ratelab_compare::run_blocking(&simulated_only(1), None).unwrap();
    results.meta.commit = "abc1234".into();
    assert!(results.provenance_warnings().is_empty());
    assert!(!report::readme(&results, &[]).contains(title));

    results.meta.commit = "abc1234-dirty".into();
    let readme = report::readme(&results, &[]);
    assert!(readme.contains(title), "{readme}");
    assert!(
        readme.contains("uncommitted changes (`abc1234-dirty`)"),
        "{readme}"
    );

    results.meta.commit = "abc1234".into();
    results.cost = Some(Cost {
        source: String::new(),
        method: Vec::new(),
        rows: Vec::new(),
        backends: Vec::new(),
        bench: Some(BenchOrigin {
            commit: "6548f3778506".into(),
            date: "2026-12-01T08:13:04Z".into(),
            is_this_commit: false,
            redis_cell: None,
        }),
    });
    let warnings = results.provenance_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("commit 6548f3778506"), "{warnings:?}");
    assert!(warnings[0].contains("NOT from this run's commit `abc1234`"));
}

#[test]
fn without_redis_the_redis_parts_are_skipped_loudly() {
    let results = ratelab_compare::run_blocking(&simulated_only(1), None).unwrap();
    assert!(!results.skipped.is_empty());
    let readme = report::readme(&results, &[]);
    assert!(readme.contains("## ⚠ Skipped in this run"), "{readme}");
    assert!(readme.contains("redis-server"), "says how to enable it");
    let edge = results.window_edge.unwrap();
    assert!(edge.rows.iter().all(|r| r.backend == "memory"));
    through_the_server(&edge, &["memory"]);
}

/// Runs `config` on a throwaway Redis server.
fn with_redis(config: &Config) -> ratelab_compare::Results {
    // redis-cell loaded when it builds, as `just compare` does.
    let server = match ratelab_testkit::redis_cell::library() {
        Ok(path) => RedisServer::start_with(&["--loadmodule", path.to_str().unwrap()]),
        Err(_) => RedisServer::start(),
    };
    let runtime = ratelab_compare::runtime().unwrap();
    runtime.block_on(async {
        let env = RedisEnv::connect(server.url(), "test server".into(), None)
            .await
            .unwrap();
        ratelab_compare::run(config, Some(&env)).await.unwrap()
    })
}

/// The window edge through ratelab-server, on each of `backends`: the
/// fixed window spent its limit on both sides of an edge within a second,
/// twice the limit; GCRA stayed within its own bound for the span it ran
/// (counts only: the real clock decides where the bursts fall, never what
/// is asserted of them).
fn through_the_server(edge: &WindowEdge, backends: &[&str]) {
    let limit = u64::from(edge.limit);
    let mut seen: Vec<(&str, &str)> = edge
        .server_rows
        .iter()
        .map(|r| (r.algorithm.as_str(), r.backend.as_str()))
        .collect();
    seen.sort_unstable();
    let mut wanted: Vec<(&str, &str)> = backends
        .iter()
        .flat_map(|&b| [("fixed-window", b), ("gcra", b)])
        .collect();
    wanted.sort_unstable();
    assert_eq!(seen, wanted, "{:?}", edge.server_rows);
    for row in &edge.server_rows {
        assert!(row.requests >= row.admitted, "{row:?}");
        assert!(row.admitted as u64 <= row.own_bound, "{row:?}");
        match row.algorithm.as_str() {
            "fixed-window" => {
                assert!(row.spent_both_windows && row.span_secs < 1.0, "{row:?}");
                assert!(
                    row.admitted as u64 > limit,
                    "{row:?}: the fixed window's flaw"
                );
                assert_eq!(row.admitted as u64, 2 * limit, "{row:?}");
            }
            _ => {
                // The first burst takes the whole burst (its limit), the
                // second what came back since; under a second, less than
                // twice the limit.
                assert!(row.admitted as u64 >= limit, "{row:?}");
                if row.span_secs < 1.0 {
                    assert!((row.admitted as u64) < 2 * limit, "{row:?}");
                }
            }
        }
    }
}

#[test]
fn the_reference_table_and_the_window_edge_on_both_backends() {
    let config = Config {
        scenarios: vec![ScenarioName::Reference, ScenarioName::WindowEdge],
        ..Config::quick(1)
    };
    let started = std::time::Instant::now();
    let results = with_redis(&config);
    // However slow this machine was, no real-clock round lasted longer.
    let ran_secs = usize::try_from(started.elapsed().as_secs() + 1).unwrap_or(usize::MAX);
    assert!(results.skipped.is_empty(), "{:?}", results.skipped);
    let reference = results.reference.unwrap();
    for backend in ["memory", "redis"] {
        let row = reference
            .rows
            .iter()
            .find(|r| r.algorithm == "token-bucket" && r.backend == backend)
            .unwrap();
        // The article: 10 admitted, then 5, and a refusal says wait 1 s.
        assert_eq!(
            (
                row.burst_admitted,
                row.later_admitted,
                row.burst_wait_secs,
                row.later_wait_secs
            ),
            (10, 5, Some(1), Some(1)),
            "{backend}"
        );
        assert_eq!(row.wait_text(), "1 s");
    }
    // The article's own setup, real clock and real wait: 10, then 5 on an
    // idle machine. A loaded one stretches the rounds and the sleep, which
    // only refills more, so bound it: the full capacity passes at once, at
    // least a second's refill passes later, and never more than the capacity
    // plus what the rate refilled while the test ran.
    for row in &reference.real_time_rows {
        assert!(row.burst_admitted >= 10, "{row:?}");
        assert!(row.later_admitted >= 5, "{row:?}");
        assert!(
            row.burst_admitted + row.later_admitted <= 10_usize.saturating_add(5 * ran_secs),
            "{row:?} in {ran_secs} s"
        );
        assert!(row.later_admitted <= 10, "{row:?}: 10 calls");
    }
    assert_eq!(reference.real_time_rows.len(), 2);

    let edge = results.window_edge.unwrap();
    for backend in ["memory", "redis"] {
        let total = |name: &str| {
            edge.rows
                .iter()
                .find(|r| r.algorithm == name && r.backend == backend)
                .unwrap()
                .total
        };
        assert!(
            total("fixed-window") > 10,
            "{backend}: the fixed window's flaw"
        );
        assert_eq!(total("fixed-window"), 20, "{backend}");
        assert!(total("sliding-log") <= 10, "{backend}: the exact log");
    }
    through_the_server(&edge, &["memory", "redis"]);
}

#[test]
fn the_report_has_every_chart_and_section_on_a_small_run() {
    let config = Config {
        repeats: 2,
        ..Config::quick(3)
    };
    let results = with_redis(&config);
    let cell_built = ratelab_testkit::redis_cell::library().is_ok();
    assert!(
        results
            .skipped
            .iter()
            .all(|s| !cell_built && s.what.contains("redis-cell")),
        "{:?}",
        results.skipped
    );
    // The flaws show on a real Redis.
    let race = results.concurrency.as_ref().unwrap();
    assert!(race.rows.iter().all(|r| r.atomic.unwrap().max <= 10.0));
    let balancer = results.load_balancer.as_ref().unwrap();
    assert!(balancer.rows.iter().all(|r| r.per_instance_memory == 20));
    assert!(
        balancer
            .rows
            .iter()
            .all(|r| r.shared_redis.unwrap().max <= 10.0)
    );

    if cell_built {
        let reference = results.reference.as_ref().unwrap();
        assert_eq!(reference.redis_cell_rows.len(), 2, "{reference:?}");
        // redis-cell 0.5.0 rounds a wait up to whole seconds (a 200 ms
        // wait reads 1 s): measured against ratelab's exact waits, every
        // refusal by both says so, and compared by that rule they agree.
        if let ratelab_testkit::redis_cell::Source::Peer(_) = ratelab_testkit::redis_cell::source()
        {
            let cell = reference
                .agreement
                .iter()
                .find(|a| a.peer == "redis-cell")
                .unwrap();
            let rounding = cell.rounding.unwrap();
            assert!(rounding.refusals > 0, "{cell:?}");
            assert_eq!(rounding.up, rounding.refusals, "{cell:?}");
            assert_eq!(cell.differing_waits, 0, "{cell:?}");
        }
    }

    let dir = tempfile::tempdir().unwrap();
    report::write(&results, dir.path()).unwrap();
    let readme = std::fs::read_to_string(dir.path().join(report::README)).unwrap();
    // Every table well formed; at least one per scenario (the guide has
    // none).
    let tables = tables::check_tables(&readme, "generated README.md");
    assert!(tables >= results.meta.durations.len(), "{tables} tables");
    for chart in [
        "burst-timeline",
        "accuracy",
        "window-edge",
        "smoothness",
        "cost",
        "cost-memory",
        "flood",
        "outage",
        "failover",
    ] {
        for ext in ["svg", "png"] {
            let path = dir.path().join("charts").join(format!("{chart}.{ext}"));
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            assert!(size > 1_000, "{} is missing or empty", path.display());
        }
        assert!(
            readme.contains(&format!("charts/{chart}.png")),
            "{chart} inline"
        );
    }
    // The race and the balancer say what they prove in a sentence, not in
    // a wall of equal bars.
    for chart in ["concurrency", "load-balancer"] {
        assert!(!readme.contains(&format!("charts/{chart}.png")), "{chart}");
    }
    assert!(readme.contains("**What it shows:** read-then-write went over the limit"));
    assert!(readme.contains("**What it shows:** the algorithm does not matter here"));
    through_the_server(results.window_edge.as_ref().unwrap(), &["memory", "redis"]);
    assert!(readme.contains("### Through ratelab-server"), "{readme}");
    assert!(
        readme.contains(
            "**What it shows:** through the server, the fixed window admitted 20 in memory and 20 on Redis within"
        ),
        "{readme}"
    );
    assert!(readme.contains("GCRA admitted"), "{readme}");
    assert!(readme.contains("stayed within its own bound"), "{readme}");
    for section in [
        "## What was run",
        "## Decision guide",
        "## Reference table",
        "## Window edge",
        "## Concurrency",
        "## Load balancer",
        "## Realistic traffic",
        "## Smoothness",
        "## Cost",
        "## Light traffic",
        "## Key flood",
        "## Redis outage",
        "## Failover",
        "## Raw data",
    ] {
        assert!(readme.contains(section), "{section} missing");
    }
    assert_eq!(readme.contains("Skipped in this run"), !cell_built);
    for data in [
        "results.json",
        "reference.csv",
        "window-edge.csv",
        "window-edge-server.csv",
        "concurrency.csv",
        "load-balancer.csv",
        "traffic.csv",
        "burst-timeline.csv",
        "smoothness.csv",
        "cost.csv",
        "light-traffic.csv",
        "flood.csv",
        "outage.csv",
        "failover.csv",
    ] {
        assert!(dir.path().join("data").join(data).is_file(), "{data}");
    }
    // A failover: the lag's admissions are counted again without strict
    // mode, never with it; what the master admitted in the lag is a count
    // on the hand-moved clock, the same every run.
    let failover = results.failover.as_ref().unwrap();
    assert_eq!(failover.rows.len(), 7 * Case::ALL.len());
    for row in &failover.rows {
        let name = row.algorithm.as_str();
        match row.case {
            Case::Healthy => assert!(row.beyond_bound <= failover.clients, "{row:?}"),
            Case::Lagging => {
                // Before the step of the kill: 6 steps of 5 for the
                // debts; a window's 50 for the fixed window and the log.
                let counted = row.after_cut - row.in_kill_step;
                match name {
                    "fixed-window" | "sliding-log" => assert_eq!(counted, 50, "{row:?}"),
                    "sliding-counter" => {}
                    _ => assert_eq!(counted, 30, "{row:?}"),
                }
                assert!(
                    row.beyond_bound <= row.after_cut + failover.clients,
                    "{row:?}"
                );
            }
            Case::Strict => {
                assert_eq!(row.beyond_bound, 0, "{row:?}");
                assert_eq!(row.after_cut, 0, "{row:?}");
            }
        }
    }
    assert!(failover.worst(Case::Lagging) >= 30, "{failover:?}");
    assert_eq!(failover.latency.len(), 2);
    assert_eq!(failover.cell.is_empty(), !cell_built);
    // 0.5.0 replicates CL.THROTTLE: what it admitted survives the
    // failover. crates.io's 0.2.2 does not: its promoted replica starts
    // from nothing and admits again.
    if let Some(cell) = failover.cell.first() {
        match ratelab_testkit::redis_cell::source() {
            ratelab_testkit::redis_cell::Source::Peer(_) => {
                assert!(cell.beyond_bound <= failover.clients, "{cell:?}");
            }
            ratelab_testkit::redis_cell::Source::CratesIo => {
                assert!(cell.beyond_bound > 0, "{cell:?}");
            }
            ratelab_testkit::redis_cell::Source::Given(_) => {}
        }
    }
    let guide = report::guide(&results);
    assert!(guide.len() >= 8, "{guide:#?}");
}

#[test]
fn a_bench_summary_is_read_when_present() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("summary.json");
    std::fs::write(
        &path,
        r#"{"generated_by":"ratelab-benches","commit":"abc1234def0","results":[
            {"algorithm":"gcra","backend":"memory","ns_per_check":12.5,"bytes_per_key":48}],
            "rows":[
            {"group":"module-server-hot","algorithm":"gcra","backend":"redis-lua","metric":"usec_per_call","value":16.0},
            {"group":"module-server-hot","algorithm":"gcra","backend":"redis-module","metric":"usec_per_call","value":4.0},
            {"group":"module-server-100k","algorithm":"gcra","backend":"redis-cell","metric":"usec_per_call","value":4.8},
            {"group":"module-server-hot","algorithm":"sliding-log","backend":"redis-module","metric":"usec_per_call","value":7.5}]}"#,
    )
    .unwrap();
    // A summary of another commit: its figures stay out of the cost table.
    let config = Config {
        scenarios: vec![ScenarioName::Cost],
        bench_summary: Some(path.clone()),
        commit: Some("6548f37".into()),
        ..Config::quick(1)
    };
    let results = ratelab_compare::run_blocking(&config, None).unwrap();
    assert_eq!(results.provenance_warnings().len(), 1);
    let cost = results.cost.unwrap();
    assert!(
        cost.rows
            .iter()
            .all(|r| !r.memory_ns_per_check.unwrap().from_bench)
    );
    assert!(
        cost.source.contains("not this run's `6548f37`"),
        "{}",
        cost.source
    );
    // A summary of this run's commit: its figures stand beside the run's.
    let config = Config {
        commit: Some("abc1234".into()),
        ..config
    };
    let results = ratelab_compare::run_blocking(&config, None).unwrap();
    assert!(results.provenance_warnings().is_empty());
    let cost = results.cost.unwrap();
    let gcra = cost.rows.iter().find(|r| r.algorithm == "gcra").unwrap();
    let figure = gcra.memory_ns_per_check.unwrap();
    assert_eq!((figure.value, figure.from_bench), (12.5, true));
    let token = cost
        .rows
        .iter()
        .find(|r| r.algorithm == "token-bucket")
        .unwrap();
    assert!(
        !token.memory_ns_per_check.unwrap().from_bench,
        "measured here"
    );
    assert!(cost.source.contains("summary"), "{}", cost.source);
    // The Redis backends side by side: a row per algorithm and backend
    // measured, and their chart.
    let module = |algorithm: &str| {
        cost.backends
            .iter()
            .find(|b| b.algorithm == algorithm && b.backend == "native module")
            .and_then(|b| b.server_us_hot)
    };
    assert_eq!(
        (module("gcra"), module("sliding-log")),
        (Some(4.0), Some(7.5))
    );
    assert_eq!(cost.backends.len(), 4, "{:?}", cost.backends);
    let results = ratelab_compare::Results {
        cost: Some(cost),
        ..results
    };
    let out = tempfile::tempdir().unwrap();
    report::write(&results, out.path()).unwrap();
    let readme = std::fs::read_to_string(out.path().join("README.md")).unwrap();
    assert!(readme.contains("charts/cost-backends.png"), "{readme}");
    let png = out.path().join("charts").join("cost-backends.png");
    assert!(std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0) > 1_000);
}

#[test]
fn bad_options_and_unreachable_redis_are_clear_errors() {
    let bin = env!("CARGO_BIN_EXE_ratelab-compare");
    let out = Command::new(bin)
        .arg("--scenario")
        .arg("nope")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid value 'nope'"), "{stderr}");
    assert!(!stderr.contains("panicked"));

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin)
        .args([
            "--redis-url",
            "redis://127.0.0.1:1/",
            "--quick",
            "--quiet",
            "-o",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot reach Redis at redis://127.0.0.1:1/"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = Command::new(bin).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for scenario in [
        "reference",
        "window-edge",
        "concurrency",
        "load-balancer",
        "traffic",
        "smoothness",
        "cost",
    ] {
        assert!(help.contains(scenario), "--help explains {scenario}");
    }
}

/// The numbers in `text`, commas dropped (`6,884` is `6884`), outside
/// `[...]` (a section's name and method).
fn numbers(text: &str) -> Vec<String> {
    let (mut out, mut current, mut depth) = (Vec::new(), String::new(), 0);
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        let inner_separator = (c == '.' || c == ',')
            && !current.is_empty()
            && chars.get(i + 1).is_some_and(char::is_ascii_digit);
        if depth == 0 && (c.is_ascii_digit() || inner_separator) {
            if c != ',' {
                current.push(c);
            }
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// What is wrong with a generated report: machine paths, and numbers the
/// one-screen table cites that no other table of the report holds.
fn report_problems(readme: &str) -> Vec<String> {
    let mut problems: Vec<String> = ["/work/", "/tmp/", "/home/", "/root/"]
        .into_iter()
        .filter(|path| readme.contains(path))
        .map(|path| format!("a machine path: {path}"))
        .collect();
    let start = readme
        .find("## In one screen")
        .expect("a one-screen section");
    let end = start + 2 + readme[start + 2..].find("\n## ").expect("a next section");
    let table_numbers: std::collections::HashSet<String> = readme[end..]
        .lines()
        .filter(|l| l.starts_with('|'))
        .flat_map(numbers)
        .collect();
    for line in readme[start..end].lines().filter(|l| l.starts_with("| ")) {
        let Some(figure) = line.split(" | ").nth(2) else {
            continue;
        };
        for n in numbers(figure) {
            if !table_numbers.contains(&n) {
                problems.push(format!(
                    "{n}, cited in the one-screen table ({figure}), is in no table"
                ));
            }
        }
    }
    problems
}

#[test]
fn numbers_are_read_as_the_report_writes_them() {
    assert_eq!(
        numbers("6,884 answers, 84.2 % [Cost: 5 repeats] end. 1096 (1999 / 2099)"),
        ["6884", "84.2", "1096", "1999", "2099"]
    );
}

#[test]
fn the_report_names_no_machine_path_and_its_one_screen_figures_are_in_its_tables() {
    let config = Config {
        scenarios: vec![
            ScenarioName::LoadBalancer,
            ScenarioName::Traffic,
            ScenarioName::Smoothness,
            ScenarioName::Settle,
            ScenarioName::Leases,
            ScenarioName::Flood,
            ScenarioName::ServerReference,
        ],
        ..Config::quick(11)
    };
    let results = ratelab_compare::run_blocking(&config, None).unwrap();
    let readme = report::readme(&results, &[]);
    assert_eq!(report_problems(&readme), Vec::<String>::new(), "{readme}");
    // The committed report, as `just compare` wrote it.
    let committed =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../reports/README.md");
    let committed = std::fs::read_to_string(committed).unwrap();
    assert_eq!(report_problems(&committed), Vec::<String>::new());
    // A path, and a figure in no table, are found.
    let planted = committed.replacen("## What was run", "/home/x\n\n## What was run", 1);
    assert_eq!(report_problems(&planted).len(), 1);
}
