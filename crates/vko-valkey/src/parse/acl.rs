//! `ACL GETUSER`'s passwords, and the hash Valkey keeps a password under.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::reply::Reply;

/// How Valkey keeps a password in an ACL user (and lists it in `ACL GETUSER`): SHA-256, lower-case
/// hex. Comparing against it tells which passwords a server accepts without reading them back.
pub fn password_hash(password: &str) -> String {
    hex::encode(Sha256::digest(password.as_bytes()))
}

/// The `passwords` field of an `ACL GETUSER` reply (a flat key/value array in RESP2, a map in
/// RESP3), in the server's order.
pub fn parse_acl_passwords(reply: Reply) -> Result<Vec<String>> {
    let what = "ACL GETUSER";
    let pairs: Vec<(Reply, Reply)> = match reply {
        Reply::Map(pairs) => pairs,
        Reply::Array(items) => {
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                pairs.push((key, value));
            }
            pairs
        }
        Reply::Nil => return Err(Error::parse(what, "no such user")),
        other => {
            return Err(Error::parse(
                what,
                format!("expected an array or map, got {}", other.kind()),
            ));
        }
    };
    let passwords = pairs
        .into_iter()
        .find(|(key, _)| key.as_text().as_deref() == Some("passwords"))
        .ok_or_else(|| Error::parse(what, "no passwords field"))?
        .1;
    passwords
        .expect_array(what)?
        .into_iter()
        .map(|hash| hash.expect_text(what))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn text(s: &str) -> Reply {
        Reply::Text(s.to_owned())
    }

    #[test]
    fn the_hash_is_what_valkey_lists_for_the_password() {
        // `ACL SETUSER default >old` then `ACL GETUSER default` on valkey 8.0.1 lists this.
        assert_eq!(
            password_hash("old"),
            "cba06b5736faf67e54b07b561eae94395e774c517a7d910a54369e1263ccfbd4"
        );
    }

    #[test]
    fn passwords_are_read_in_server_order_from_either_shape() {
        let fields = vec![
            text("flags"),
            Reply::Array(vec![text("on")]),
            text("passwords"),
            Reply::Array(vec![text("aa"), text("bb")]),
            text("commands"),
            text("+@all"),
        ];
        assert_eq!(
            parse_acl_passwords(Reply::Array(fields.clone())).unwrap(),
            ["aa", "bb"]
        );
        let mut map = Vec::new();
        let mut items = fields.into_iter();
        while let (Some(k), Some(v)) = (items.next(), items.next()) {
            map.push((k, v));
        }
        assert_eq!(parse_acl_passwords(Reply::Map(map)).unwrap(), ["aa", "bb"]);
        assert!(parse_acl_passwords(Reply::Nil).is_err());
        assert!(parse_acl_passwords(Reply::Array(vec![text("flags"), text("on")])).is_err());
    }
}
