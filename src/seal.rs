//! Sealing what a client carries for the relay: a reasoning item's `encrypted_content` is the
//! item's reasoning, encrypted and authenticated (ChaCha20-Poly1305, ring) with the relay's
//! secret, so a stateless client can send it back and the relay (only the relay) can open it.
//!
//! The key is `--secret-key` (hashed to 32 bytes with SHA-256), else a key file the relay creates
//! beside its SQLite store and reuses after restarts, else (memory or Redis store) a key made at
//! start: seals then open only in that process. Several relays behind one Redis need one
//! `--secret-key`.
//!
//! Invariants: a seal is `rr1.` + base64url(nonce ‖ ciphertext ‖ tag) with a fresh random nonce;
//! anything that is not a seal of this key, or was altered, does not open; the key is never
//! printed (`Debug` shows nothing of it).

use std::io::Write;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};

const PREFIX: &str = "rr1.";

/// The key file's name, beside the SQLite store.
pub const KEY_FILE: &str = "relay-secret.key";

/// Seals and opens with one key.
pub struct Sealer {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(***)")
    }
}

/// Why a seal did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SealError(&'static str);

impl Sealer {
    fn from_key(bytes: [u8; 32]) -> Self {
        Sealer {
            key: LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &bytes).expect("32 bytes")),
            rng: SystemRandom::new(),
        }
    }

    /// A key derived from an operator's secret (any string).
    pub fn from_secret(secret: &str) -> Self {
        let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        Self::from_key(key)
    }

    /// A key made now, for this process only.
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        SystemRandom::new()
            .fill(&mut key)
            .expect("the system's random source works");
        Self::from_key(key)
    }

    /// The key in `path` (64 hex digits), or a new one written there (mode 0600) when the file
    /// does not exist yet.
    pub fn from_key_file(path: &Path) -> std::io::Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let hex = text.trim();
                let mut key = [0u8; 32];
                if hex.len() != 64 || !hex.is_ascii() {
                    return Err(invalid(path));
                }
                for (i, byte) in key.iter_mut().enumerate() {
                    *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                        .map_err(|_| invalid(path))?;
                }
                Ok(Self::from_key(key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; 32];
                SystemRandom::new()
                    .fill(&mut key)
                    .map_err(|_| std::io::Error::other("no random source"))?;
                let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
                // Written whole to a file of its own, then linked into place: a crash leaves no
                // empty key file, and a relay starting at the same moment reads a whole one.
                let tmp = path.with_extension(format!(
                    "tmp-{}-{:x}",
                    std::process::id(),
                    rand::random::<u32>()
                ));
                let mut options = std::fs::OpenOptions::new();
                options.write(true).create_new(true);
                #[cfg(unix)]
                std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
                let mut f = options.open(&tmp)?;
                f.write_all(hex.as_bytes())?;
                f.sync_all()?;
                drop(f);
                let linked = std::fs::hard_link(&tmp, path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => Ok(Self::from_key(key)),
                    // Another process made it first: use theirs.
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Self::from_key_file(path)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    /// `plaintext`, sealed.
    pub fn seal(&self, plaintext: &[u8]) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng
            .fill(&mut nonce)
            .expect("the system's random source works");
        let mut sealed = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(PREFIX),
                &mut sealed,
            )
            .expect("sealing cannot fail for in-memory data");
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out))
    }

    /// What `sealed` holds, if this key sealed it and nothing changed it since.
    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, SealError> {
        let body = sealed
            .strip_prefix(PREFIX)
            .ok_or(SealError("it was not sealed by this relay"))?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| SealError("it is not valid base64url"))?;
        if bytes.len() < NONCE_LEN {
            return Err(SealError("it is too short"));
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let mut rest = rest.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| SealError("bad nonce"))?;
        let plain = self
            .key
            .open_in_place(nonce, ring::aead::Aad::from(PREFIX), &mut rest)
            .map_err(|_| {
                SealError("it does not open with this relay's key (another key sealed it, or it was changed)")
            })?;
        Ok(plain.to_vec())
    }
}

fn invalid(path: &Path) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{}: expected 64 hex digits", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_opens_with_its_key_only() {
        let a = Sealer::from_secret("one");
        let sealed = a.seal(b"thinking");
        assert!(sealed.starts_with("rr1."));
        assert_eq!(a.open(&sealed).unwrap(), b"thinking");
        assert_ne!(a.seal(b"thinking"), sealed, "a fresh nonce each time");
        assert!(Sealer::from_secret("two").open(&sealed).is_err());
        assert!(Sealer::random().open(&sealed).is_err());
    }

    #[test]
    fn an_altered_or_foreign_seal_does_not_open() {
        let a = Sealer::from_secret("one");
        let sealed = a.seal(b"thinking");
        let mut bytes = sealed.into_bytes();
        let last = bytes.len() - 1;
        bytes[last] = if bytes[last] == b'A' { b'B' } else { b'A' };
        assert!(a.open(std::str::from_utf8(&bytes).unwrap()).is_err());
        assert!(a.open("gAAAAABopenai-encrypted").is_err());
        assert!(a.open("rr1.").is_err());
        assert!(a.open("rr1.!!!").is_err());
    }

    #[test]
    fn a_key_file_is_made_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("relay-seal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(KEY_FILE);
        let _ = std::fs::remove_file(&path);
        let first = Sealer::from_key_file(&path).unwrap();
        let sealed = first.seal(b"kept");
        let again = Sealer::from_key_file(&path).unwrap();
        assert_eq!(again.open(&sealed).unwrap(), b"kept");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(&path, "not a key").unwrap();
        assert!(Sealer::from_key_file(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_key_is_never_printed() {
        assert_eq!(
            format!("{:?}", Sealer::from_secret("hunter2")),
            "Sealer(***)"
        );
    }
}
