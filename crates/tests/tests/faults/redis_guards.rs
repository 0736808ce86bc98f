//! The Redis guards start real servers, restart them on the same port, pause
//! them, and build a three-master cluster.

use std::time::Duration;

use ratelab_testkit::redis::{RedisCluster, RedisServer};

#[test]
fn a_server_starts_restarts_and_pauses() {
    let mut server = RedisServer::start();
    assert_eq!(server.command(&["PING"]).unwrap(), "PONG");
    assert_eq!(server.command(&["SET", "k", "v"]).unwrap(), "OK");
    assert_eq!(
        server.command(&["CONFIG", "GET", "save"]).unwrap(),
        "save\n"
    );
    let port = server.port();

    server.kill();
    assert!(server.command(&["PING"]).is_err());
    server.restart();
    assert_eq!(server.port(), port);
    assert_eq!(server.command(&["GET", "k"]).unwrap(), "", "no persistence");

    server.pause();
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    std::io::Write::write_all(&mut &stream, b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut buf = [0u8; 16];
    assert!(
        std::io::Read::read(&mut &stream, &mut buf).is_err(),
        "a paused server answers nothing"
    );
    server.resume();
    assert_eq!(server.command(&["PING"]).unwrap(), "PONG");
    assert!(
        std::fs::read_to_string(server.log_path())
            .unwrap()
            .contains("Ready to accept connections")
    );
}

#[test]
fn a_cluster_of_three_masters_is_ready() {
    let cluster = RedisCluster::start();
    assert_eq!(cluster.urls().len(), 3);
    for node in cluster.nodes() {
        let info = node.command(&["CLUSTER", "INFO"]).unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
    }
}
