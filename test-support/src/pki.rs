//! Certificates made here with openssl, in a temporary directory: private
//! CAs and the certificates they sign, for the TLS tests (to Redis, and of
//! the gRPC server).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// P-256 keys: quick to make, and rustls takes them.
const CURVE: &str = "ec_paramgen_curve:prime256v1";

/// A directory of certificates and keys, each file named by its role.
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn empty() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// `{name}.crt` and `{name}.key`: a CA valid for a day.
    pub fn self_signed_ca(&self, name: &str, common_name: &str) {
        let (key, crt, subject) = (
            format!("{name}.key"),
            format!("{name}.crt"),
            format!("/CN={common_name}"),
        );
        self.openssl(&[
            "req", "-x509", "-newkey", "ec", "-pkeyopt", CURVE, "-nodes", "-keyout", &key, "-out",
            &crt, "-days", "1", "-subj", &subject,
        ]);
    }

    /// `{name}.crt` and `{name}.key` (PKCS#8), signed by the CA `{ca}`,
    /// with `alt_names` as its subject alternative names
    /// (`IP:127.0.0.1,DNS:localhost,URI:spiffe://test/x`).
    pub fn leaf(&self, name: &str, ca: &str, alt_names: &str) {
        let (key, csr, subject) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("/CN={name}"),
        );
        self.openssl(&[
            "req", "-newkey", "ec", "-pkeyopt", CURVE, "-nodes", "-keyout", &key, "-out", &csr,
            "-subj", &subject,
        ]);
        self.sign(name, ca, alt_names);
    }

    /// `{name}.crt` for the key already in `{name}.key`, as [`Self::leaf`].
    pub fn leaf_for_key(&self, name: &str, ca: &str, alt_names: &str) {
        let (key, csr, subject) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("/CN={name}"),
        );
        self.openssl(&["req", "-new", "-key", &key, "-out", &csr, "-subj", &subject]);
        self.sign(name, ca, alt_names);
    }

    /// Signs `{name}.csr` with `{ca}` into `{name}.crt`. The extensions
    /// make it a v3 certificate, the only kind webpki takes.
    fn sign(&self, name: &str, ca: &str, alt_names: &str) {
        let (csr, crt, ext) = (
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        std::fs::write(self.path(&ext), format!("subjectAltName={alt_names}\n")).unwrap();
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &crt,
            "-days",
            "1",
            "-extfile",
            &ext,
        ]);
    }

    pub fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("openssl must be on PATH");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_owned()
    }

    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}
