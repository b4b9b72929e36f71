//! Certificates made by the tests (rcgen): a CA that signs server and client certificates for
//! 127.0.0.1, written as PEM files.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, SanType,
};

/// A CA that signs server and client certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name.push(DnType::CommonName, name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().expect("key");
        let cert = p.self_signed(&key).expect("self-signed CA");
        Ca { cert, key }
    }

    /// A leaf for 127.0.0.1 (server) or a client, valid now unless `expired`; (cert, key) PEM.
    pub fn issue(&self, client: bool, expired: bool) -> (String, String) {
        let mut p = CertificateParams::new(vec!["localhost".to_string()]).expect("params");
        p.subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        p.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2020, 2, 1);
        }
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.cert, &self.key).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.cert.pem()).expect("write CA");
        path
    }
}

pub fn write_pair(dir: &Path, name: &str, pair: &(String, String)) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    // Written next to the target and renamed, as cert-manager's atomic writer does.
    for (path, text) in [(&cert, &pair.0), (&key, &pair.1)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    }
    (cert, key)
}
