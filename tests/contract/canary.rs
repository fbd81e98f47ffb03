//! A canary for the policy rows: a TCP server on loopback that accepts and drops every
//! connection, reachable only from a sandbox that shares the host's network.

use sandboxio::testing::contract::Canary;

/// Starts the server on a free loopback port (a thread for the rest of the run).
pub fn loopback() -> Canary {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    Canary { host: "127.0.0.1".into(), port }
}
