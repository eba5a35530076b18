//! A TCP server on a free loopback port that is not Redis: what a client meets when `REDIS_URL`
//! names the wrong port (a web server, some other daemon, a process that accepts and hangs).

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// What a [`NotRedis`] server does with each connection it accepts. Whatever it is, the socket
/// stays open (unread) until the server is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Behaviour {
    /// Writes bytes that are no protocol at all.
    Garbage,
    /// Writes an HTTP/1.1 `400 Bad Request` reply, as a web server does to a request it cannot
    /// parse.
    Http,
    /// Writes nothing: a client waiting for an answer waits forever.
    Silent,
}

impl Behaviour {
    fn greeting(self) -> &'static [u8] {
        match self {
            Self::Garbage => b"\x00\x01\x02\xff\xfe garbage \x07\r\n",
            Self::Http => {
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 11\r\n\
                  Connection: keep-alive\r\n\r\nBad Request"
            }
            Self::Silent => b"",
        }
    }
}

/// A server on `127.0.0.1:<free port>` that accepts connections and answers them as its
/// [`Behaviour`] says, never as Redis would. Stopped (and every socket closed) on drop.
///
/// ```no_run
/// use redis_guard_testkit::{NotRedis, not_redis::Behaviour};
/// let server = NotRedis::start(Behaviour::Silent).unwrap();
/// println!("point REDIS_URL at {}", server.url());
/// ```
#[derive(Debug)]
pub struct NotRedis {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NotRedis {
    /// Listens on a free loopback port and serves connections on a thread of its own.
    ///
    /// # Errors
    ///
    /// No port could be bound.
    pub fn start(behaviour: Behaviour) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            // Held, unread, until the server stops: the peer sees an open connection.
            let mut held = Vec::new();
            for stream in listener.incoming() {
                if stopped.load(Ordering::Acquire) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.write_all(behaviour.greeting());
                held.push(stream);
            }
        });
        Ok(Self {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// The port it listens on (on 127.0.0.1).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `redis://127.0.0.1:<port>/`: a Redis URL that points at this server.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }
}

impl Drop for NotRedis {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // Wakes the accept loop, which then sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
