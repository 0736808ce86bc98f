//! What envoyproxy/ratelimit accepts, refuses and matches, case by case
//! (the cases of its `test/config` and README, written anew).

use super::*;

fn load(text: &str) -> Result<Config, String> {
    let mut config = Config::default();
    config
        .add(Path::new("conf/d.yaml"), text, false)
        .map_err(|e| e.to_string())?;
    Ok(config)
}

fn error(text: &str) -> String {
    load(text).expect_err("refused")
}

fn find(config: &Config, domain: &str, entries: &[(&str, &str)]) -> Option<Found> {
    config.find(domain, entries)
}

const BASIC: &str = "\
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit:
          unit: second
          requests_per_unit: 5
      - key: subkey1
        value: subvalue1
        rate_limit:
          unit: Second
          requests_per_unit: 10
  - key: key2
    rate_limit:
      unit: MINUTE
      requests_per_unit: 20
  - key: key2
    value: value2
    rate_limit:
      unit: minute
      requests_per_unit: 30
  - key: key3
    rate_limit:
      unit: hour
      requests_per_unit: 4294967295
  - key: key4
    rate_limit:
      name: key4_rate_limit
      unit: day
      requests_per_unit: 0
  - key: key5
    rate_limit:
      unlimited: true
  - key: key7
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 70
";

#[test]
fn every_unit_case_and_any_uint32_is_accepted() {
    let config = load(BASIC).unwrap();
    let limit = |entries: &[(&str, &str)]| find(&config, "test-domain", entries).unwrap();
    let key2 = limit(&[("key2", "x")]);
    assert_eq!(
        (key2.limit.requests_per_unit, key2.limit.unit),
        (20, Some(Unit::Minute))
    );
    assert_eq!(key2.stats_key, "test-domain.key2");
    assert_eq!(key2.limit.name, "");
    let value2 = limit(&[("key2", "value2")]);
    assert_eq!(value2.limit.requests_per_unit, 30);
    assert_eq!(value2.stats_key, "test-domain.key2_value2");
    assert_eq!(limit(&[("key3", "x")]).limit.requests_per_unit, u32::MAX);
    let key4 = limit(&[("key4", "x")]);
    assert_eq!(
        (key4.limit.requests_per_unit, key4.limit.name.as_str()),
        (0, "key4_rate_limit")
    );
    assert!(limit(&[("key5", "x")]).limit.unlimited);
    let nested = limit(&[("key1", "value1"), ("subkey1", "something")]);
    assert_eq!(nested.stats_key, "test-domain.key1_value1.subkey1");
    let exact = limit(&[("key1", "value1"), ("subkey1", "subvalue1")]);
    assert_eq!(exact.limit.unit, Some(Unit::Second));
    assert_eq!(exact.stats_key, "test-domain.key1_value1.subkey1_subvalue1");
    // Only where the last entry lands, and only at the configured depth.
    assert!(find(&config, "test-domain", &[("key1", "value1")]).is_none());
    assert!(find(&config, "test-domain", &[("key2", "value2"), ("sub", "x")]).is_none());
    assert!(find(&config, "test-domain", &[("key1", "something")]).is_none());
    assert!(find(&config, "test-domain", &[]).is_none());
    assert!(find(&config, "other-domain", &[("key2", "x")]).is_none());
    // detailed_metric names the request's values.
    let detailed = limit(&[("key7", "unspecified_value")]);
    assert_eq!(detailed.stats_key, "test-domain.key7_unspecified_value");
}

#[test]
fn wildcards_match_anywhere_first_listed_first() {
    let config = load(
        "\
domain: w
descriptors:
  - key: wild
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: wild
    value: fo*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: midWild
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: multiWild
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: nestedWild
    value: val1
    descriptors:
      - key: wild
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 5}
",
    )
    .unwrap();
    let rpu = |entries: &[(&str, &str)]| {
        find(&config, "w", entries).map(|f| (f.limit.requests_per_unit, f.stats_key))
    };
    assert_eq!(rpu(&[("wild", "foo1")]), Some((1, "w.wild_foo*".into())));
    // The first that matches, not the longest.
    assert_eq!(rpu(&[("wild", "fox")]), Some((2, "w.wild_fo*".into())));
    assert_eq!(
        rpu(&[("midWild", "barab")]),
        Some((3, "w.midWild_bar*b".into()))
    );
    assert_eq!(rpu(&[("midWild", "barb")]).map(|r| r.0), Some(3));
    assert_eq!(rpu(&[("midWild", "bara")]), None);
    assert_eq!(rpu(&[("midWild", "xbarb")]), None);
    assert_eq!(
        rpu(&[("multiWild", "foo123bar456baz")]).map(|r| r.0),
        Some(4)
    );
    assert_eq!(rpu(&[("multiWild", "foobarbaz")]).map(|r| r.0), Some(4));
    assert_eq!(rpu(&[("multiWild", "foo123baz")]), None);
    assert_eq!(rpu(&[("multiWild", "bar456baz")]), None);
    assert_eq!(
        rpu(&[("nestedWild", "val1"), ("wild", "goo2")]),
        Some((5, "w.nestedWild_val1.wild_goo*".into()))
    );
    assert_eq!(rpu(&[("wild", "bar")]), None);
}

#[test]
fn share_threshold_and_value_to_metric_name_as_the_reference_does() {
    let config = load(
        "\
domain: s
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
",
    )
    .unwrap();
    let files = find(&config, "s", &[("files", "files/a.pdf")]).unwrap();
    assert_eq!(files.share_patterns, Some(vec!["files/*".to_owned()]));
    assert_eq!(files.stats_key, "s.files_files/*");
    let route = find(
        &config,
        "s",
        &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ],
    )
    .unwrap();
    assert_eq!(route.stats_key, "s.route_api.http_method_GET.subject_id");
    let user = find(
        &config,
        "s",
        &[
            ("user", "alice"),
            ("action", "readfile"),
            ("resource", "documents"),
        ],
    )
    .unwrap();
    assert_eq!(user.stats_key, "s.user_alice.action_readfile.resource");
}

#[test]
fn the_fields_the_reference_accepts_are_accepted() {
    let config = load(
        "\
domain: m
descriptors:
  - key: a
    quota_mode: true
    shadow_mode: yes
    metadata:
      team: payments
      tags: [x, 1]
      nested: {on: true}
    rate_limit:
      unit: minute
      requests_per_unit: 3
      name: a-limit
      replaces:
        - name: other
  # Keys valid anywhere are ignored where they mean nothing.
  - key: b
    unit: second
    rate_limit:
",
    )
    .unwrap();
    let a = find(&config, "m", &[("a", "1")]).unwrap();
    assert!(a.limit.quota_mode && a.limit.shadow);
    assert_eq!(a.limit.replaces, ["other"]);
    let metadata = a.metadata.unwrap();
    assert_eq!(
        metadata.fields["team"].kind,
        Some(ProtoKind::StringValue("payments".into()))
    );
    assert!(find(&config, "m", &[("b", "1")]).is_none());
}

#[test]
fn what_the_reference_refuses_is_refused_with_the_file_line_and_problem() {
    let cases: &[(&str, &str)] = &[
        (
            "domain: ''\n",
            "conf/d.yaml:1:9: config file cannot have empty domain",
        ),
        ("descriptors: []\n", "config file cannot have empty domain"),
        (
            "domain: d\ndescriptors:\n  - value: v\n",
            "conf/d.yaml:3:5: descriptor has empty key",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "conf/d.yaml:5:5: duplicate descriptor composite key 'd.k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: foo\n      requests_per_unit: 1\n",
            "conf/d.yaml:5:13: invalid rate limit unit 'foo'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n",
            "invalid rate limit unit ''",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}\n",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: n\n",
            "conf/d.yaml:9:11: replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces:\n        - name: ''\n",
            "should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    ratelimit:\n      unit: second\n",
            "conf/d.yaml:4:5: config error, unknown key 'ratelimit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requestsperunit: 5}\n",
            "config error, unknown key 'requestsperunit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    0.25: x\n",
            "config error, key is not of type string: 0.25",
        ),
        (
            "domain: d\ndescriptors:\n  - a\n",
            "conf/d.yaml:3:5: config error, yaml file contains list of type other than map: a",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}\n",
            "error checking config",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
            "cannot unmarshal !!int `-1` into uint32",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n",
            "cannot unmarshal !!int `4294967296` into uint32",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: 'true'\n",
            "cannot unmarshal !!str `true` into bool",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
            "share_threshold can only be used with wildcard values (containing '*'), but found key 'k_v'",
        ),
        ("domain: d\ndescriptors:\n  - key: [\n", "conf/d.yaml:4:"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra2}\n",
            "unknown algorithm \"gcra2\"",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n",
            "config error, unknown key 'algorithm'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4000000000, algorithm: gcra}\n",
            "d.k: gcra cannot count 4000000000 per second",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, lease: 'yes'}\n",
            "conf/d.yaml:4:78: lease must be true or false",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: envoy-fixed-window, lease: true}\n",
            "d.k: lease: true needs one of ratelab's algorithms",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    lease: true\n",
            "config error, unknown key 'lease'",
        ),
    ];
    for (text, expected) in cases {
        let error = error(text);
        assert!(
            error.contains(expected),
            "{text:?}\n  gave {error:?}\n  expected {expected:?}"
        );
    }
}

#[test]
fn a_domain_in_two_files_is_refused_unless_merged() {
    let first = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    let second = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    let mut config = Config::default();
    config.add(Path::new("a.yaml"), first, false).unwrap();
    let error = config
        .add(Path::new("b.yaml"), second, false)
        .unwrap_err()
        .to_string();
    assert_eq!(error, "b.yaml:1:9: duplicate domain 'd' in config file");
    config.add(Path::new("b.yaml"), second, true).unwrap();
    assert!(config.find("d", &[("a", "x")]).is_some());
    assert_eq!(
        config
            .find("d", &[("b", "x")])
            .unwrap()
            .limit
            .requests_per_unit,
        2
    );
    // A key defined in both is still a duplicate.
    let error = config
        .add(Path::new("c.yaml"), first, true)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("duplicate descriptor composite key 'd.a'"),
        "{error}"
    );
}

#[test]
fn replaces_and_names_are_kept_for_the_service() {
    let config = load(
        "\
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit: {name: specific_limit, requests_per_unit: 5, unit: second}
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces: [{name: specific_limit}]
          requests_per_unit: 10
          unit: second
",
    )
    .unwrap();
    let replacing = find(
        &config,
        "example7",
        &[("key_2", "value_2"), ("user", "bkthomps")],
    )
    .unwrap();
    assert_eq!(replacing.limit.replaces, ["specific_limit"]);
    let named = find(
        &config,
        "example7",
        &[("key_1", "value_1"), ("user", "bkthomps")],
    )
    .unwrap();
    assert_eq!(named.limit.name, "specific_limit");
}

#[test]
fn the_runtime_directory_reads_every_file_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ratelimit/config");
    std::fs::create_dir_all(config.join("nested")).unwrap();
    std::fs::write(config.join("a.yaml"), "domain: a\n").unwrap();
    std::fs::write(config.join("nested/b.conf"), "domain: b\n").unwrap();
    std::fs::write(config.join(".hidden"), "domain: c\n").unwrap();
    let runtime = RuntimeDirectory {
        root: dir.path().to_owned(),
        subdirectory: "ratelimit".into(),
        app_directory: "config".into(),
        ignore_dot_files: false,
        watch_root: false,
    };
    assert_eq!(runtime.files().unwrap().len(), 3);
    let runtime = RuntimeDirectory {
        ignore_dot_files: true,
        ..runtime
    };
    let files = runtime.files().unwrap();
    assert_eq!(files.len(), 2);
    let loaded = Config::load_files(&files, false).unwrap();
    assert_eq!(loaded.len(), 2);
    // Watching the root: a `config.*` file beside the directory counts.
    std::fs::write(
        dir.path().join("ratelimit/config.extra.yaml"),
        "domain: e\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("ratelimit/other.yaml"), "domain: o\n").unwrap();
    let watching = RuntimeDirectory {
        watch_root: true,
        ..runtime.clone()
    };
    assert_eq!(watching.files().unwrap().len(), 3);
    let missing = RuntimeDirectory {
        subdirectory: "nothing".into(),
        ..runtime.clone()
    };
    assert!(missing.files().unwrap().is_empty());
    let unset = RuntimeDirectory {
        subdirectory: "".into(),
        ..runtime
    };
    assert!(unset.files().unwrap().is_empty());
}

#[test]
fn rlconfig_prints_the_references_lines_and_names_only_chosen_algorithms() {
    let config = load(
        "\
domain: d
descriptors:
  - key: k
    rate_limit: {unit: MINUTE, requests_per_unit: 2}
  - key: u
    rate_limit: {unlimited: true}
  - key: g
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: gcra}
",
    )
    .unwrap();
    // The first two lines as envoyproxy/ratelimit's /rlconfig prints them.
    assert_eq!(
        config.dump(),
        "\
d.g: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false, algorithm: gcra
d.k: unit=MINUTE requests_per_unit=2, shadow_mode: false, quota_mode: false
d.u: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false
"
    );
}

#[test]
fn a_limit_that_requires_a_lease_the_server_cannot_give_is_refused_with_where_it_is() {
    use crate::lease::check;
    use ratelab::lease::LeaseConfig;
    let yaml = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 5, lease: true}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, lease: false}\n";
    let (name, domain) = parse(Path::new("d.yaml"), yaml).unwrap();
    let config = Config::from_domains([(name, domain)]);
    let leases = LeaseConfig::default();
    let gcra = Algorithm::Ratelab(AlgorithmKind::Gcra);
    // `a` names no algorithm: leased under a ratelab default, refused
    // under the reference's.
    assert_eq!(check(&config, gcra, Some(&leases)), Ok(()));
    let refused = check(&config, Algorithm::EnvoyFixedWindow, Some(&leases)).unwrap_err();
    assert!(refused.starts_with("d.yaml:4:"), "{refused}");
    assert!(
        refused.contains("d.a: lease: true needs one of ratelab's algorithms"),
        "{refused}"
    );
    let off = check(&config, gcra, None).unwrap_err();
    assert!(
        off.contains("the server does not lease (--lease-lifetime-ms"),
        "{off}"
    );
    // `lease: false` is kept in /rlconfig's line.
    assert!(config.dump().contains("d.b: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false, algorithm: gcra, lease: false"), "{}", config.dump());
}
