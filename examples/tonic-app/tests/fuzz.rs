//! No call reaches a panic: generated `Get` indexes, `Stream` lengths and `x-api-key` metadata on
//! the `tonic-app` binary over real HTTP/2. Every call gets a status that is not `INTERNAL` or
//! `UNKNOWN` (what a panicking handler or a dropped connection turns into), on one connection
//! that stays usable throughout.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis_guard_testkit::app::spawn;
use tonic::{Code, Request, Status};
use tonic_app::pb::quotes_client::QuotesClient;
use tonic_app::pb::{GetRequest, StreamRequest};

/// A generated call: `Get` or `Stream`, its number, and an API key (none: by client IP).
#[derive(Debug, Clone)]
enum Call {
    Get(u32, Option<String>),
    Stream(u32, Option<String>),
}

fn call() -> impl Strategy<Value = Call> {
    let key = prop::option::of("[ -~]{0,80}");
    let number = prop_oneof![
        any::<u32>(),
        Just(u32::MAX),
        Just(0),
        Just(tonic_app::MAX_STREAM_LEN),
        Just(tonic_app::MAX_STREAM_LEN + 1),
        0..5u32,
    ];
    prop_oneof![
        (number.clone(), key.clone()).prop_map(|(n, k)| Call::Get(n, k)),
        (number, key).prop_map(|(n, k)| Call::Stream(n, k)),
    ]
}

fn with_key<T>(message: T, key: Option<&str>) -> Request<T> {
    let mut req = Request::new(message);
    // A key that is not a valid metadata value cannot be sent at all: sent without one.
    if let Some(value) = key.and_then(|k| k.parse().ok()) {
        req.metadata_mut().insert("x-api-key", value);
    }
    req
}

fn judged(call: &Call, outcome: Result<(), Status>) -> Result<(), TestCaseError> {
    match outcome {
        Err(s) if matches!(s.code(), Code::Internal | Code::Unknown | Code::Unavailable) => Err(
            TestCaseError::fail(format!("{call:?}: {:?} {}", s.code(), s.message())),
        ),
        _ => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_reaches_a_panic_on_the_memory_backend() {
    let app = spawn(
        env!("CARGO_BIN_EXE_tonic-app"),
        &[("API_LIMIT", "100000/minute")],
    )
    .await;
    let url = format!("http://{}", app.addr);
    let outcome = tokio::task::spawn_blocking(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt.block_on(QuotesClient::connect(url)).expect("connect");
        let mut runner = TestRunner::new(Config {
            cases: 200,
            max_shrink_iters: 64,
            ..Config::default()
        });
        runner
            .run(&call(), |call| {
                // A clone shares the one connection.
                let mut client = client.clone();
                let outcome = rt.block_on(async {
                    match &call {
                        Call::Get(index, key) => client
                            .get(with_key(GetRequest { index: *index }, key.as_deref()))
                            .await
                            .map(drop),
                        // The first quote, then the stream is dropped (a cancelled call).
                        Call::Stream(n, key) => {
                            let mut stream = client
                                .stream(with_key(StreamRequest { n: *n }, key.as_deref()))
                                .await?
                                .into_inner();
                            stream.message().await.map(drop)
                        }
                    }
                });
                judged(&call, outcome)
            })
            .map_err(|e| e.to_string())
    })
    .await
    .expect("the property test ran");
    if let Err(e) = outcome {
        panic!("{e}");
    }
}
