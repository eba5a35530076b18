//! TLS (`rediss://`, feature `tls`) against real TLS-only `redis-server`s whose certificates the
//! test kit makes at run time: a certificate authority that is not the server's is refused with
//! an error that says it is a certificate problem; a server that verifies clients takes a client
//! certificate and refuses a connection without one; a Redis Cluster that speaks only TLS
//! does the same on every node. The layers' suites run over TLS (a server, a pool, a cluster,
//! and the primary a sentinel names, the sentinel reached over TLS too) through
//! `backend_suite!(tls_only: …)` in their own files.

use std::time::Duration;

use redis_guard::backend::{ConnectOptions, RedisBackend, RedisConnection, TlsOptions};
use redis_guard_testkit::{RedisCluster, RedisServer, TestTls};

fn tls() -> TestTls {
    TestTls::generate().unwrap_or_else(|e| panic!("{e}"))
}

/// One call through a lock: `Ok` when Redis answered.
async fn works(conn: RedisConnection) -> Result<(), String> {
    redis_guard::backend::Lock::new(redis_guard::backend::RedisLockStore::new(
        RedisBackend::new(conn),
    ))
    .try_acquire("tls", std::time::Duration::from_secs(1))
    .await
    .map(|_| ())
    .map_err(|e| format!("{e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_from_another_authority_is_refused_as_a_certificate_problem() {
    let server = RedisServer::start_tls(&tls(), "no").unwrap_or_else(|e| panic!("{e}"));
    let other = tls();
    for (name, options) in [
        (
            "another CA",
            ConnectOptions::new().tls(TlsOptions::new().ca_pem(other.ca_pem.clone())),
        ),
        // The platform's roots do not hold the test kit's authority either.
        ("the platform's roots", ConnectOptions::new()),
    ] {
        let e = options
            .open(&server.url())
            .await
            .expect_err("an untrusted certificate");
        let text = e.to_string();
        println!("{name}: {text}");
        assert!(
            text.contains("certificate") && text.contains("127.0.0.1"),
            "{name}: {text}"
        );
    }
    let own = server.tls().expect("a TLS server").ca_pem.clone();
    let conn = ConnectOptions::new()
        .tls(TlsOptions::new().ca_pem(own))
        .open(&server.url())
        .await
        .expect("the server's own CA");
    works(conn).await.expect("a call over TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_works_with_a_client_certificate_and_fails_without_one() {
    let certs = tls();
    let server = RedisServer::start_tls(&certs, "yes").unwrap_or_else(|e| panic!("{e}"));
    let ca = TlsOptions::new().ca_pem(certs.ca_pem.clone());
    let with = ConnectOptions::new()
        .tls(
            ca.clone()
                .client_cert(certs.client_cert_pem.clone(), certs.client_key_pem.clone()),
        )
        .open(&server.url())
        .await
        .expect("a client certificate");
    works(with).await.expect("a call with a client certificate");

    let without = ConnectOptions::new().tls(ca).open(&server.url()).await;
    let e = without.expect_err("no client certificate");
    println!("without a client certificate: {e}");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_pem_is_a_configuration_error_before_any_connection() {
    let server = RedisServer::start_tls(&tls(), "no").unwrap_or_else(|e| panic!("{e}"));
    let e = ConnectOptions::new()
        .tls(TlsOptions::new().ca_pem("not a certificate"))
        .open(&server.url())
        .await
        .expect_err("no certificate in the PEM");
    assert_eq!(e.kind(), redis::ErrorKind::InvalidClientConfig, "{e:?}");
    assert!(
        e.to_string().contains("the CA PEM holds no certificate"),
        "{e}"
    );
    let e = TlsOptions::new()
        .client_cert(tls().client_cert_pem, "not a key")
        .validate()
        .expect_err("no key");
    assert!(e.to_string().contains("the client key PEM"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_refuses_another_authority_and_a_client_without_a_certificate() {
    let certs = tls();
    let cluster = {
        let certs = certs.clone();
        tokio::task::spawn_blocking(move || RedisCluster::start_tls(&certs))
            .await
            .expect("cluster start task")
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let urls = cluster.urls();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");

    let other = tls();
    let e = ConnectOptions::new()
        .tls(
            TlsOptions::new()
                .ca_pem(other.ca_pem.clone())
                .client_cert(other.client_cert_pem, other.client_key_pem),
        )
        .cluster(&urls)
        .await
        .expect_err("a cluster whose certificates another authority signed");
    let text = e.to_string();
    println!("another CA: {text}");
    assert!(
        text.contains("certificate") && text.contains("127.0.0.1"),
        "{text}"
    );

    let ca = TlsOptions::new().ca_pem(certs.ca_pem.clone());
    let e = ConnectOptions::new()
        .tls(ca.clone())
        .cluster(&urls)
        .await
        .expect_err("no client certificate");
    println!("without a client certificate: {e}");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");

    let conn = ConnectOptions::new()
        .tls(ca.client_cert(certs.client_cert_pem, certs.client_key_pem))
        .cluster(&urls)
        .await
        .expect("the cluster's own CA and a client certificate");
    // Locks on enough names that every master holds one: each node is reached over TLS.
    let lock = redis_guard::backend::Lock::new(redis_guard::backend::RedisLockStore::new(
        RedisBackend::new(conn),
    ));
    let mut held = Vec::new();
    for name in ('a'..='z').map(String::from) {
        let guard = lock
            .try_acquire(&name, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("lock {name} over TLS: {e:?}"));
        held.push(guard.expect("a free lock"));
    }
    for i in 0..urls.len() {
        let mut node = cluster.client_for(i).get_connection().expect("connect");
        let keys: u64 = redis::cmd("DBSIZE").query(&mut node).expect("DBSIZE");
        assert!(keys > 0, "node {i} holds no lock");
    }
}
