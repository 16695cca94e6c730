//! The upstream's HTTP exchanges. An `http://` model server is spoken to by the relay's own
//! HTTP/1.1 client, whose answer the run's task reads from the socket itself: no connection task
//! beside the run, no channel between them, and an idle connection holds a socket and one small
//! read buffer. `https://` origins, and every origin while an HTTP proxy is configured
//! (`HTTP_PROXY`, `ALL_PROXY`), go through reqwest (TLS, HTTP/2 by ALPN, proxies).
//!
//! Invariants: a connection goes back to its thread's pool only at a message boundary (the
//! answer read to its end with nothing after it, neither side asking to close); a pooled
//! connection the server has closed is found before a request is written to it, and a request
//! that fails on a reused connection before any byte of an answer is sent again, once, on a new
//! one. Every length the server gives is bounded: the head (64 KiB, 100 headers), a chunk-size
//! or trailer line (16 KiB).
//! Head and body framing are parsed by `httparse` (status line, headers, chunk sizes).

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{UpstreamError, transport_error};

/// The read buffer a connection starts with; it grows only for a larger head or chunk header.
const READ_BUF: usize = 4096;
/// The largest response head read, and the most headers in it.
const MAX_HEAD: usize = 64 * 1024;
const MAX_HEADERS: usize = 100;
/// The longest chunk-size or trailer line.
const MAX_LINE: usize = 16 * 1024;
/// The largest answer read whole (an error, a model list, a token count).
pub(crate) const MAX_JSON: usize = 16 << 20;
/// Connections kept idle per origin and thread, and for how long.
const MAX_IDLE: usize = 256;
const IDLE_FOR: Duration = Duration::from_secs(60);

thread_local! {
    /// Each thread's idle connections per origin (`host:port`): a connection is registered with
    /// the runtime of the thread that made it, and a lane's runs stay on its thread.
    static POOL: RefCell<HashMap<String, Vec<(TcpStream, Instant)>>> = RefCell::default();
}

/// One request to the upstream.
pub(crate) struct Request<'a> {
    pub post: bool,
    pub url: &'a str,
    /// Besides `host` and `content-length`, which the client writes.
    pub headers: &'a [(&'static str, &'a str)],
    pub body: Bytes,
}

/// The upstream's answer: its status, the one header the relay reads, and its body.
pub(crate) struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Body,
}

/// An answer's body, read chunk by chunk by whoever holds it.
pub(crate) enum Body {
    Direct(DirectBody),
    Reqwest {
        stream: BoxStream<'static, reqwest::Result<Bytes>>,
        last: Bytes,
    },
}

impl Body {
    /// The next piece of the body; `None` at its end.
    pub async fn next(&mut self) -> Option<Result<&[u8], String>> {
        match self {
            Body::Direct(b) => b.next().await,
            Body::Reqwest { stream, last } => match stream.next().await? {
                Ok(bytes) => {
                    *last = bytes;
                    Some(Ok(&last[..]))
                }
                Err(e) => Some(Err(transport_error(e).to_string())),
            },
        }
    }

    /// The whole body as JSON (`what` names it in the error).
    pub async fn json(self, what: &str) -> Result<serde_json::Value, UpstreamError> {
        let body = self.all(MAX_JSON).await.map_err(UpstreamError::Protocol)?;
        serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::Protocol(format!("{what} is not JSON: {e}")))
    }

    /// The whole body, refused past `limit` bytes.
    pub async fn all(mut self, limit: usize) -> Result<Vec<u8>, String> {
        let mut all = Vec::new();
        while let Some(piece) = self.next().await {
            let piece = piece?;
            if all.len() + piece.len() > limit {
                return Err(format!("the answer is larger than {limit} bytes"));
            }
            all.extend_from_slice(piece);
        }
        Ok(all)
    }
}

/// Whether requests to `http://` origins must go through a proxy the environment names.
fn proxied() -> bool {
    static PROXIED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROXIED.get_or_init(|| {
        ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
    })
}

/// Sends `req`: by the relay's own client to an `http://` origin (connecting within
/// `connect`), by `reqwest()`'s client otherwise.
pub(crate) async fn send(
    req: Request<'_>,
    connect: Duration,
    reqwest: impl FnOnce() -> reqwest::Client,
) -> Result<Answer, UpstreamError> {
    if req.url.starts_with("http://") && !proxied() {
        return send_direct(req, connect).await;
    }
    let client = reqwest();
    let mut rb = match req.post {
        true => client.post(req.url).body(req.body),
        false => client.get(req.url),
    };
    for (k, v) in req.headers {
        rb = rb.header(*k, *v);
    }
    let resp = rb.send().await.map_err(transport_error)?;
    let retry_after = (resp.headers().get(reqwest::header::RETRY_AFTER))
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    Ok(Answer {
        status: resp.status().as_u16(),
        retry_after,
        body: Body::Reqwest {
            stream: resp.bytes_stream().boxed(),
            last: Bytes::new(),
        },
    })
}

/// Where an `http://` URL goes: the address to connect to (`host:port`), the `host` header and
/// the request target (path and query).
fn target(url: &str) -> Result<(String, String, String), UpstreamError> {
    let bad = |why: String| UpstreamError::Connect(format!("the upstream URL {why}"));
    let u = reqwest::Url::parse(url).map_err(|e| bad(format!("is invalid: {e}")))?;
    let host = u.host_str().ok_or_else(|| bad("has no host".into()))?;
    let port = u.port_or_known_default().unwrap_or(80);
    let host_header = match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    let path = match u.query() {
        Some(q) => format!("{}?{q}", u.path()),
        None => u.path().to_string(),
    };
    Ok((format!("{host}:{port}"), host_header, path))
}

async fn send_direct(req: Request<'_>, connect: Duration) -> Result<Answer, UpstreamError> {
    let (addr, host, path) = target(req.url)?;
    let mut head = match req.post {
        true => format!(
            "POST {path} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\n",
            req.body.len()
        ),
        false => format!("GET {path} HTTP/1.1\r\nhost: {host}\r\n"),
    };
    for (k, v) in req.headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(&req.body);
    let mut reuse = true;
    loop {
        let kept = if reuse { pooled(&addr) } else { None };
        let reused = kept.is_some();
        let conn = match kept {
            Some(conn) => conn,
            None => fresh(&addr, connect).await?,
        };
        match exchange(conn, &out, &addr).await {
            Ok(answer) => return Ok(answer),
            // The server closed a kept connection as the request went out (its keep-alive
            // timeout racing the request): once more, on a new connection.
            Err(Failed {
                answered: false, ..
            }) if reused => reuse = false,
            Err(Failed { error, .. }) => return Err(UpstreamError::Protocol(error)),
        }
    }
}

async fn fresh(addr: &str, connect: Duration) -> Result<TcpStream, UpstreamError> {
    let conn = match tokio::time::timeout(connect, TcpStream::connect(addr)).await {
        Err(_) => {
            return Err(UpstreamError::Timeout(format!(
                "no connection within {connect:?}"
            )));
        }
        Ok(Err(e)) => return Err(UpstreamError::Connect(format!("{addr}: {e}"))),
        Ok(Ok(conn)) => conn,
    };
    let _ = conn.set_nodelay(true);
    Ok(conn)
}

/// This thread's idle connection to `addr`, if one is still open.
fn pooled(addr: &str) -> Option<TcpStream> {
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let idle = pool.get_mut(addr)?;
        while let Some((conn, since)) = idle.pop() {
            // 0 (closed) or bytes nobody asked for: not reusable.
            if since.elapsed() < IDLE_FOR && open_and_quiet(&conn) {
                return Some(conn);
            }
        }
        None
    })
}

fn keep(addr: String, conn: TcpStream) {
    // `try_with`: a body dropped while its thread ends just closes its connection.
    let _ = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let idle = pool.entry(addr).or_default();
        idle.retain(|(_, since)| since.elapsed() < IDLE_FOR);
        if idle.len() < MAX_IDLE {
            idle.push((conn, Instant::now()));
        }
    });
}

/// Whether a socket is open with nothing to read, asked of the kernel without waiting and
/// without taking anything (tokio's readiness is only as fresh as its last poll of the socket).
fn open_and_quiet(conn: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    recv_now(conn, &mut byte, libc::MSG_PEEK).is_none()
}

/// Reads what the kernel already holds for `conn` into `buf`, without waiting: `None` when
/// there is nothing (the socket open), `Some(0)` when it is closed or failed.
fn recv_now(conn: &TcpStream, buf: &mut [u8], flags: libc::c_int) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: recv writes at most `buf.len()` bytes into `buf`, which is borrowed mutably for
    // the call; the descriptor belongs to `conn`, borrowed for the call.
    let n = unsafe {
        libc::recv(
            conn.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags | libc::MSG_DONTWAIT,
        )
    };
    match usize::try_from(n) {
        Ok(n) => Some(n),
        Err(_) if std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock => None,
        Err(_) => Some(0),
    }
}

/// How an exchange failed, and whether any byte of an answer came first.
struct Failed {
    answered: bool,
    error: String,
}

/// Writes the request and reads the answer's head; the body is left to the [`DirectBody`].
async fn exchange(mut conn: TcpStream, out: &[u8], addr: &str) -> Result<Answer, Failed> {
    let unanswered = |e: std::io::Error| Failed {
        answered: false,
        error: format!("sending the request: {e}"),
    };
    conn.write_all(out).await.map_err(unanswered)?;
    let mut buf = Vec::with_capacity(READ_BUF);
    // Whether any byte of an answer (an interim one included) came: the request was taken.
    let mut answered = false;
    loop {
        if !buf.is_empty() {
            let failed = |error: String| Failed {
                answered: true,
                error,
            };
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(used)) => {
                    let status = resp.code.unwrap_or(0);
                    if (100..200).contains(&status) {
                        // An interim answer (`100 Continue`, `103 Early Hints`): the real one
                        // follows, perhaps already read.
                        buf.drain(..used);
                        continue;
                    }
                    let head = head(&resp).map_err(failed)?;
                    buf.drain(..used);
                    return Ok(Answer {
                        status: head.status,
                        retry_after: head.retry_after,
                        body: Body::Direct(DirectBody {
                            conn: Some(conn),
                            buf,
                            pos: 0,
                            framing: head.framing,
                            keep_alive: head.keep_alive,
                            addr: addr.to_string(),
                        }),
                    });
                }
                Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
                Ok(httparse::Status::Partial) => {
                    return Err(failed("the answer's head is too large".into()));
                }
                Err(e) => return Err(failed(format!("the answer's head is invalid: {e}"))),
            }
        }
        if buf.capacity() == buf.len() {
            buf.reserve(READ_BUF);
        }
        let n = conn.read_buf(&mut buf).await.map_err(|e| Failed {
            answered,
            error: format!("reading the answer: {e}"),
        })?;
        if n == 0 {
            return Err(Failed {
                answered,
                error: "the connection closed before an answer".into(),
            });
        }
        answered = true;
    }
}

/// What the relay reads of an answer's head.
struct Head {
    status: u16,
    framing: Framing,
    keep_alive: bool,
    retry_after: Option<String>,
}

fn head(resp: &httparse::Response<'_, '_>) -> Result<Head, String> {
    let status = resp.code.unwrap_or(0);
    let mut framing = Framing::Close;
    let mut keep_alive = resp.version == Some(1);
    let mut retry_after = None;
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or_default().trim();
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if value.to_ascii_lowercase().ends_with("chunked") {
                framing = Framing::Chunked(Chunk::Size);
            }
        } else if h.name.eq_ignore_ascii_case("content-length") {
            if matches!(framing, Framing::Close) {
                let n = (value.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| value.parse().ok())
                    .flatten()
                    .ok_or_else(|| format!("invalid content-length {value:?}"))?;
                framing = Framing::Length(n);
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            keep_alive &= !value.to_ascii_lowercase().contains("close");
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            retry_after = Some(value.to_string());
        }
    }
    if status == 204 || status == 304 {
        framing = Framing::Length(0);
    }
    Ok(Head {
        status,
        framing,
        keep_alive,
        retry_after,
    })
}

/// How a body's end is known.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Framing {
    /// This many bytes still to come.
    Length(u64),
    Chunked(Chunk),
    /// Until the server closes the connection.
    Close,
}

/// Where a chunked body's reader is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Chunk {
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines up to the empty one.
    Trailer,
    Done,
}

/// What the buffered bytes gave.
enum Step {
    /// Body bytes at `buf[start..start + len]`.
    Data(usize, usize),
    /// More bytes are needed.
    More,
    End,
}

/// A body read from its connection by its holder.
pub(crate) struct DirectBody {
    /// `None` once the body ended (the connection kept or closed) or failed.
    conn: Option<TcpStream>,
    /// Bytes read and not yet taken, from `pos` on.
    buf: Vec<u8>,
    pos: usize,
    framing: Framing,
    keep_alive: bool,
    addr: String,
}

impl DirectBody {
    async fn next(&mut self) -> Option<Result<&[u8], String>> {
        let (start, len) = loop {
            match self.step() {
                Ok(Step::Data(start, len)) => break (start, len),
                Ok(Step::End) => {
                    if let Some(conn) = self.conn.take() {
                        self.end(conn);
                    }
                    return None;
                }
                Ok(Step::More) => {}
                Err(e) => {
                    self.conn = None;
                    return Some(Err(e));
                }
            }
            let conn = self.conn.as_mut()?;
            if self.pos == self.buf.len() {
                self.buf.clear();
            } else if self.pos > 0 {
                self.buf.drain(..self.pos);
            }
            self.pos = 0;
            if self.buf.capacity() - self.buf.len() < READ_BUF / 4 {
                self.buf.reserve(READ_BUF);
            }
            match conn.read_buf(&mut self.buf).await {
                Ok(0) if self.framing == Framing::Close => {
                    self.conn = None;
                    return None;
                }
                Ok(0) => {
                    self.conn = None;
                    return Some(Err("the connection closed before the answer's end".into()));
                }
                Ok(_) => {}
                Err(e) => {
                    self.conn = None;
                    return Some(Err(format!("reading the answer: {e}")));
                }
            }
        };
        Some(Ok(&self.buf[start..start + len]))
    }

    /// Takes what the buffered bytes give, without reading.
    fn step(&mut self) -> Result<Step, String> {
        loop {
            let avail = &self.buf[self.pos..];
            match self.framing {
                Framing::Length(0) | Framing::Chunked(Chunk::Done) => return Ok(Step::End),
                Framing::Close if !avail.is_empty() => {
                    let (start, len) = (self.pos, avail.len());
                    self.pos += len;
                    return Ok(Step::Data(start, len));
                }
                Framing::Length(n) | Framing::Chunked(Chunk::Data(n)) if !avail.is_empty() => {
                    let len = (avail.len() as u64).min(n) as usize;
                    let start = self.pos;
                    self.pos += len;
                    self.framing = match self.framing {
                        Framing::Length(_) => Framing::Length(n - len as u64),
                        _ if n == len as u64 => Framing::Chunked(Chunk::DataEnd),
                        _ => Framing::Chunked(Chunk::Data(n - len as u64)),
                    };
                    return Ok(Step::Data(start, len));
                }
                // httparse takes an empty size line for 0: a size starts with a digit.
                Framing::Chunked(Chunk::Size)
                    if avail.first().is_some_and(|b| !b.is_ascii_hexdigit()) =>
                {
                    return Err("the answer has an invalid chunk size".into());
                }
                Framing::Chunked(Chunk::Size) => match httparse::parse_chunk_size(avail) {
                    Ok(httparse::Status::Complete((used, size))) => {
                        self.pos += used;
                        self.framing = Framing::Chunked(match size {
                            0 => Chunk::Trailer,
                            n => Chunk::Data(n),
                        });
                    }
                    Ok(httparse::Status::Partial) if avail.len() < MAX_LINE => {
                        return Ok(Step::More);
                    }
                    Ok(httparse::Status::Partial) | Err(_) => {
                        return Err("the answer has an invalid chunk size".into());
                    }
                },
                Framing::Chunked(Chunk::DataEnd) if avail.len() >= 2 => {
                    if &avail[..2] != b"\r\n" {
                        return Err("a chunk of the answer does not end with CRLF".into());
                    }
                    self.pos += 2;
                    self.framing = Framing::Chunked(Chunk::Size);
                }
                Framing::Chunked(Chunk::Trailer) => {
                    let Some(eol) = avail.windows(2).position(|w| w == b"\r\n") else {
                        return match avail.len() < MAX_LINE {
                            true => Ok(Step::More),
                            false => Err("the answer has a trailer line too long".into()),
                        };
                    };
                    self.pos += eol + 2;
                    if eol == 0 {
                        self.framing = Framing::Chunked(Chunk::Done);
                    }
                }
                _ => return Ok(Step::More),
            }
        }
    }

    /// At the body's end: `conn` back to the pool when nothing follows and both sides keep it.
    fn end(&mut self, conn: TcpStream) {
        if self.keep_alive && self.pos == self.buf.len() {
            keep(std::mem::take(&mut self.addr), conn);
        }
    }
}

impl Drop for DirectBody {
    /// A body dropped before its end (the reader stopped at `[DONE]`, or went away) still gives
    /// its connection back when the rest has already arrived: what the kernel holds is read
    /// without waiting, and the connection is kept if that completes the body.
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        let mut room = [0u8; READ_BUF / 4];
        // At most 16 reads: a body still streaming is not drained here.
        for _ in 0..16 {
            loop {
                match self.step() {
                    Ok(Step::Data(..)) => {}
                    Ok(Step::End) => return self.end(conn),
                    Ok(Step::More) => break,
                    Err(_) => return,
                }
            }
            match recv_now(&conn, &mut room, 0) {
                Some(n) if n > 0 && self.buf.len() - self.pos < READ_BUF => {
                    self.buf.drain(..self.pos);
                    self.pos = 0;
                    self.buf.extend_from_slice(&room[..n]);
                }
                _ => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A server on loopback: on each of `conns` connections it reads requests and answers each
    /// with the next of `answers` (written byte by byte when `trickle`; an empty one closes the
    /// connection instead); a `None` next closes the connection before a request, and no answers
    /// left ends the server. Returns the address and the requests'
    /// first lines.
    async fn server(
        conns: usize,
        answers: Vec<Option<&'static [u8]>>,
        trickle: bool,
    ) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let mut answers = answers.into_iter().peekable();
            let mut seen = Vec::new();
            'all: for _ in 0..conns {
                let (mut conn, _) = listener.accept().await.unwrap();
                'conn: loop {
                    match answers.peek() {
                        None => break 'all,
                        Some(None) => {
                            answers.next();
                            break 'conn;
                        }
                        Some(Some(_)) => {}
                    }
                    let mut req = Vec::new();
                    let mut byte = [0u8; 1];
                    while !req.ends_with(b"\r\n\r\n") {
                        if conn.read(&mut byte).await.unwrap_or(0) == 0 {
                            break 'conn;
                        }
                        req.push(byte[0]);
                    }
                    let head = String::from_utf8(req).unwrap();
                    let len: usize = (head.lines())
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.parse().unwrap());
                    let mut body = vec![0; len];
                    conn.read_exact(&mut body).await.unwrap();
                    seen.push(head.lines().next().unwrap().to_string());
                    match answers.next().flatten() {
                        // An empty answer: the request read, then the connection closed.
                        Some([]) => break 'conn,
                        Some(a) if trickle => {
                            for b in a {
                                conn.write_all(&[*b]).await.unwrap();
                                tokio::task::yield_now().await;
                            }
                        }
                        Some(a) => conn.write_all(a).await.unwrap(),
                        None => break 'conn,
                    }
                }
            }
            seen
        });
        (addr, task)
    }

    async fn get(addr: &str, path: &str) -> Result<(u16, String), UpstreamError> {
        let url = format!("http://{addr}{path}");
        let req = Request {
            post: true,
            url: &url,
            headers: &[("accept", "text/event-stream")],
            body: Bytes::from_static(b"{}"),
        };
        let answer = send_direct(req, Duration::from_secs(5)).await?;
        let body = answer.body.all(1 << 20).await.map_err(UpstreamError::Cut)?;
        Ok((answer.status, String::from_utf8(body).unwrap()))
    }

    fn idle(addr: &str) -> usize {
        POOL.with(|p| p.borrow().get(addr).map_or(0, Vec::len))
    }

    /// A whole answer of two bytes, `ok`.
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\
        5;ext=1\r\ndata:\r\n5\r\n hi\n\n\r\n0\r\nx-trailer: 1\r\n\r\n";

    #[tokio::test]
    async fn a_chunked_answer_arriving_byte_by_byte_is_read_whole_and_its_connection_kept() {
        let (addr, seen) = server(1, vec![Some(CHUNKED), Some(CHUNKED)], true).await;
        assert_eq!(
            get(&addr, "/v1/x?a=1").await.unwrap(),
            (200, "data: hi\n\n".into())
        );
        assert_eq!(idle(&addr), 1);
        // The server accepts once: the second answer comes only on the kept connection.
        assert_eq!(get(&addr, "/v1/y").await.unwrap().1, "data: hi\n\n");
        assert_eq!(
            seen.await.unwrap(),
            ["POST /v1/x?a=1 HTTP/1.1", "POST /v1/y HTTP/1.1"]
        );
    }

    #[tokio::test]
    async fn a_length_answer_is_read_to_its_length_and_a_close_delimited_one_to_the_end() {
        let length: &[u8] =
            b"HTTP/1.1 429 Too Many\r\ncontent-length: 4\r\nretry-after: 2\r\n\r\nslow";
        let close: &[u8] = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it";
        let (addr, _seen) = server(1, vec![Some(length), Some(close), None], false).await;
        assert_eq!(get(&addr, "/a").await.unwrap(), (429, "slow".into()));
        assert_eq!(idle(&addr), 1);
        assert_eq!(get(&addr, "/b").await.unwrap(), (200, "all of it".into()));
        // `connection: close`: not kept.
        assert_eq!(idle(&addr), 0);
    }

    #[tokio::test]
    async fn a_kept_connection_the_server_closed_is_left_for_a_new_one() {
        // The first connection answers once and closes; the second answers again.
        let (addr, seen) = server(2, vec![Some(OK), None, Some(OK)], false).await;
        assert_eq!(get(&addr, "/1").await.unwrap().1, "ok");
        assert_eq!(idle(&addr), 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(get(&addr, "/2").await.unwrap().1, "ok");
        assert_eq!(
            seen.await.unwrap(),
            ["POST /1 HTTP/1.1", "POST /2 HTTP/1.1"]
        );
    }

    #[tokio::test]
    async fn a_request_a_kept_connection_closes_on_unanswered_goes_out_again_on_a_new_one() {
        // The kept connection takes the second request and closes without a byte of answer (a
        // server's keep-alive timeout racing the request); a new connection answers it.
        let (addr, seen) = server(2, vec![Some(OK), Some(b""), Some(OK)], false).await;
        assert_eq!(get(&addr, "/1").await.unwrap().1, "ok");
        assert_eq!(idle(&addr), 1);
        assert_eq!(get(&addr, "/2").await.unwrap().1, "ok");
        assert_eq!(
            seen.await.unwrap(),
            ["POST /1 HTTP/1.1", "POST /2 HTTP/1.1", "POST /2 HTTP/1.1"]
        );
    }

    #[tokio::test]
    async fn a_body_dropped_once_its_rest_has_arrived_gives_its_connection_back() {
        let (addr, _seen) = server(1, vec![Some(CHUNKED)], false).await;
        let url = format!("http://{addr}/");
        let req = Request {
            post: false,
            url: &url,
            headers: &[],
            body: Bytes::new(),
        };
        let mut answer = send_direct(req, Duration::from_secs(5)).await.unwrap();
        // The first piece only, as a reader stopping at `[DONE]` does.
        assert_eq!(answer.body.next().await.unwrap().unwrap(), b"data:");
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(answer);
        assert_eq!(idle(&addr), 1);
    }

    #[tokio::test]
    async fn a_bad_chunk_size_or_a_cut_body_is_an_error() {
        let bad: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n";
        // An empty size line is not the last chunk.
        let empty: &[u8] =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n\r\n\r\nmore";
        let cut: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort";
        let answers = vec![Some(bad), None, Some(empty), None, Some(cut), None];
        let (addr, _seen) = server(3, answers, false).await;
        for _ in 0..2 {
            let e = get(&addr, "/").await.unwrap_err().to_string();
            assert!(e.contains("invalid chunk size"), "{e}");
        }
        let e = get(&addr, "/").await.unwrap_err().to_string();
        assert!(e.contains("closed before the answer's end"), "{e}");
        assert_eq!(idle(&addr), 0);
    }

    #[tokio::test]
    async fn an_interim_answer_read_with_the_final_one_is_passed_over() {
        let both: &[u8] = b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\n\
            HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
        let (addr, _seen) = server(1, vec![Some(both)], false).await;
        let got = tokio::time::timeout(Duration::from_secs(5), get(&addr, "/")).await;
        assert_eq!(got.expect("answered").unwrap(), (200, "ok".into()));
    }

    #[tokio::test]
    async fn an_answer_with_a_hundred_headers_is_read() {
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n".to_vec();
        for i in 0..99 {
            answer.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
        }
        answer.extend_from_slice(b"\r\nok");
        let (addr, _seen) = server(1, vec![Some(answer.leak())], false).await;
        assert_eq!(get(&addr, "/").await.unwrap(), (200, "ok".into()));
    }
}
