//! The binary over real gRPC with envoy-types' tonic client: health,
//! `ShouldRateLimit`, and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

const CONFIG: &str = "\
domain: rust
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
";

/// Waits, when the hour ends within a minute, until it has: the few calls
/// of a test then fall in one window of the clock.
fn clear_of_the_hours_edge() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let left = 3600 - now.as_secs() % 3600;
    if left < 60 {
        std::thread::sleep(std::time::Duration::from_secs(left + 1));
    }
}

/// The server, killed if the test fails before it is stopped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the binary on `config` with `args`; the guard and a channel to it.
async fn spawn(config: &std::path::Path, args: &[&str]) -> (Server, tonic::transport::Channel) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_owned();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (server, channel)
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "rust".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: "ann".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_redis_sentinel() {
    clear_of_the_hours_edge();
    let master = ratelab_testkit::redis::RedisServer::start();
    let sentinel =
        ratelab_testkit::redis::RedisServer::start_sentinel(master.port(), "rl", 1, 5000);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rust.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let url = sentinel.url();
    let (_server, channel) = spawn(
        &config,
        &[
            "--sentinel",
            &url,
            "--sentinel-service",
            "rl",
            "--redis-timeout-ms",
            "2000",
        ],
    )
    .await;
    let mut client = RateLimitServiceClient::new(channel);
    let mut codes = Vec::new();
    for _ in 0..3 {
        let answer = client
            .should_rate_limit(request())
            .await
            .unwrap()
            .into_inner();
        codes.push(answer.overall_code);
    }
    assert_eq!(
        codes,
        [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]
    );
    // Counted on the master the sentinel names.
    let keys = ratelab_testkit::redis::command(master.port(), &["DBSIZE"]).unwrap();
    assert_ne!(keys.trim(), "0", "{keys}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_should_rate_limit_and_sigterm() {
    clear_of_the_hours_edge();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rust.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let (mut server, channel) = spawn(&config, &[]).await;
    let mut health = HealthClient::new(channel.clone());
    let status = health
        .check(HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    let mut client = RateLimitServiceClient::new(channel);
    let request = request();
    let mut codes = Vec::new();
    let mut remaining = Vec::new();
    for _ in 0..3 {
        let answer = client
            .should_rate_limit(request.clone())
            .await
            .unwrap()
            .into_inner();
        codes.push(answer.overall_code);
        remaining.push(answer.statuses[0].limit_remaining);
    }
    assert_eq!(
        codes,
        [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]
    );
    assert_eq!(remaining, [1, 0, 0]);

    // The connection stays open, as Envoy's would: the server closes it.
    let pid = server.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let mut child = std::mem::replace(&mut server.0, Command::new("true").spawn().unwrap());
    // Waited for off the runtime, which keeps serving the client's side.
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}
