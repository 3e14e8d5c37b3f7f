//! NDJSON line framing shared by every line-based face: one frame per `\n`, with a size
//! limit enforced while reading (an oversized line is skipped, never buffered whole).

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What one read produced.
pub enum Frame {
    /// A complete line is in the buffer (without its newline).
    Line,
    /// A line over the limit was skipped.
    TooLarge,
    /// The peer closed the connection.
    Eof,
}

/// Reads one `\n`-terminated frame into `buf`, refusing (and skipping) frames over `max`.
pub async fn read_frame<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Frame> {
    buf.clear();
    let mut over = false;
    loop {
        let avail = r.fill_buf().await?;
        if avail.is_empty() {
            // A client that half-closes after its last request still gets its answer.
            return Ok(if over {
                Frame::TooLarge
            } else if buf.is_empty() {
                Frame::Eof
            } else {
                Frame::Line
            });
        }
        if let Some(i) = avail.iter().position(|b| *b == b'\n') {
            if !over && buf.len() + i <= max {
                buf.extend_from_slice(&avail[..i]);
            } else {
                over = true;
            }
            r.consume(i + 1);
            return Ok(if over { Frame::TooLarge } else { Frame::Line });
        }
        let n = avail.len();
        if !over && buf.len() + n <= max {
            buf.extend_from_slice(avail);
        } else {
            over = true;
            buf.clear();
        }
        r.consume(n);
    }
}

/// True for an HTTP/1.x request line (`METHOD target HTTP/1.x`): a browser page can make a
/// browser POST to a loopback port, and its body lines must never run as frames.
pub fn is_http_request(line: &[u8]) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !method.is_empty()
        && method.iter().all(u8::is_ascii_uppercase)
        && !target.is_empty()
        && version.starts_with(b"HTTP/")
}
