//! `Reply`: this crate's own representation of a server reply, so the parsers (and callers) never see
//! the wire library's types. Error replies never become a `Reply`; they become an [`Error`].

use crate::error::{Error, Result};

/// One decoded reply (RESP2, or RESP3 folded onto the same shapes).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Nil bulk string or nil array.
    Nil,
    /// `+...` status reply, or any text (bulk strings that are valid UTF-8 are also text).
    Text(String),
    /// A bulk string that is not valid UTF-8.
    Bytes(Vec<u8>),
    /// `:123`
    Int(i64),
    /// RESP3 double.
    Double(f64),
    /// RESP3 boolean.
    Bool(bool),
    /// `*N` array.
    Array(Vec<Reply>),
    /// RESP3 map, in server order.
    Map(Vec<(Reply, Reply)>),
}

impl Reply {
    /// The reply as text: status, UTF-8 bulk string, or a number rendered as text.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Reply::Text(text) => Some(text.clone()),
            Reply::Int(n) => Some(n.to_string()),
            Reply::Double(d) => Some(d.to_string()),
            Reply::Bool(b) => Some(b.to_string()),
            Reply::Bytes(bytes) => String::from_utf8(bytes.clone()).ok(),
            Reply::Nil | Reply::Array(_) | Reply::Map(_) => None,
        }
    }

    /// The reply as an integer: `:N`, or a text holding a decimal integer (Sentinel and ROLE send
    /// numbers as bulk strings).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Text(text) => text.parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn expect_text(self, what: &str) -> Result<String> {
        self.as_text().ok_or_else(|| {
            Error::parse(
                what,
                format!("expected a string reply, got {}", self.kind()),
            )
        })
    }

    pub(crate) fn expect_int(&self, what: &str) -> Result<i64> {
        self.as_int().ok_or_else(|| {
            Error::parse(
                what,
                format!("expected an integer reply, got {}", self.kind()),
            )
        })
    }

    pub(crate) fn expect_array(self, what: &str) -> Result<Vec<Reply>> {
        match self {
            Reply::Array(items) => Ok(items),
            other => Err(Error::parse(
                what,
                format!("expected an array reply, got {}", other.kind()),
            )),
        }
    }

    /// `+OK` (the status replies of REPLICAOF, CONFIG SET, CLIENT PAUSE, FAILOVER ...).
    pub(crate) fn expect_ok(self, what: &str) -> Result<()> {
        match &self {
            Reply::Text(text) if text.starts_with("OK") => Ok(()),
            other => Err(Error::parse(what, format!("expected OK, got {other:?}"))),
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Reply::Nil => "nil",
            Reply::Text(_) => "string",
            Reply::Bytes(_) => "binary string",
            Reply::Int(_) => "integer",
            Reply::Double(_) => "double",
            Reply::Bool(_) => "boolean",
            Reply::Array(_) => "array",
            Reply::Map(_) => "map",
        }
    }
}

/// Decode exactly one complete RESP2 reply from `input` (used on captured replies and by tools).
/// An error reply decodes to `Err` classified with [`Error::from_server_reply`].
pub fn decode_resp2(input: &[u8]) -> Result<Reply> {
    let mut rest = input;
    let reply = decode_one(&mut rest)?;
    if !rest.is_empty() {
        return Err(Error::parse(
            "RESP2",
            format!("{} trailing bytes", rest.len()),
        ));
    }
    reply
}

/// Returns `Ok(Err(server error))` for an error reply so arrays containing errors still consume their
/// bytes; the outer error is a framing problem.
fn decode_one(input: &mut &[u8]) -> Result<Result<Reply>> {
    let line = take_line(input)?;
    let (kind, body) = line
        .split_first()
        .ok_or_else(|| Error::parse("RESP2", "empty line"))?;
    let body = std::str::from_utf8(body).map_err(|e| Error::parse("RESP2", e.to_string()))?;
    let number = || -> Result<i64> {
        body.parse()
            .map_err(|_| Error::parse("RESP2", format!("bad length or integer {body:?}")))
    };
    match kind {
        b'+' => Ok(Ok(Reply::Text(body.to_owned()))),
        b'-' => Ok(Err(Error::from_server_reply(body))),
        b':' => Ok(Ok(Reply::Int(number()?))),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Ok(Reply::Nil));
            }
            let len = usize::try_from(len).map_err(|e| Error::parse("RESP2", e.to_string()))?;
            if input.len() < len + 2 || &input[len..len + 2] != b"\r\n" {
                return Err(Error::parse("RESP2", "truncated bulk string"));
            }
            let data = input[..len].to_vec();
            *input = &input[len + 2..];
            Ok(Ok(match String::from_utf8(data) {
                Ok(text) => Reply::Text(text),
                Err(e) => Reply::Bytes(e.into_bytes()),
            }))
        }
        b'*' => {
            let len = number()?;
            if len < 0 {
                return Ok(Ok(Reply::Nil));
            }
            let mut items = Vec::new();
            for _ in 0..len {
                match decode_one(input)? {
                    Ok(item) => items.push(item),
                    Err(server_error) => return Ok(Err(server_error)),
                }
            }
            Ok(Ok(Reply::Array(items)))
        }
        other => Err(Error::parse(
            "RESP2",
            format!("unknown type byte {other:#x}"),
        )),
    }
}

fn take_line<'a>(input: &mut &'a [u8]) -> Result<&'a [u8]> {
    let end = input
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or_else(|| Error::parse("RESP2", "missing CRLF"))?;
    let line = &input[..end];
    *input = &input[end + 2..];
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_nested_arrays_and_scalars() {
        let raw = b"*4\r\n+OK\r\n:-7\r\n$3\r\nabc\r\n*2\r\n$-1\r\n*-1\r\n";
        assert_eq!(
            decode_resp2(raw),
            Ok(Reply::Array(vec![
                Reply::Text("OK".into()),
                Reply::Int(-7),
                Reply::Text("abc".into()),
                Reply::Array(vec![Reply::Nil, Reply::Nil]),
            ]))
        );
    }

    #[test]
    fn decodes_error_reply_as_classified_error() {
        assert_eq!(
            decode_resp2(b"-READONLY no\r\n").map_err(|e| e.reason()),
            Err("ReadOnly")
        );
    }

    #[test]
    fn rejects_truncated_and_trailing_input() {
        assert_eq!(
            decode_resp2(b"$5\r\nab\r\n").map_err(|e| e.reason()),
            Err("ParseError")
        );
        assert_eq!(
            decode_resp2(b":1\r\n:2\r\n").map_err(|e| e.reason()),
            Err("ParseError")
        );
        assert_eq!(
            decode_resp2(b":x\r\n").map_err(|e| e.reason()),
            Err("ParseError")
        );
        assert_eq!(decode_resp2(b"").map_err(|e| e.reason()), Err("ParseError"));
    }

    #[test]
    fn binary_bulk_string_stays_bytes() {
        assert_eq!(
            decode_resp2(b"$2\r\n\xff\xfe\r\n"),
            Ok(Reply::Bytes(vec![0xff, 0xfe]))
        );
    }
}
