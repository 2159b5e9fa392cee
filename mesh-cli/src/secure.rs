//! `mesh secure <DIR>`: generates a secure profile, so that nobody writes ACL lines or
//! password hashes by hand. For a named set of agents (each with the peers it may call) and
//! gateway deployments it writes:
//!
//! | file | what |
//! | --- | --- |
//! | `broker/passwords` | every account's password hash, Mosquitto's format (`password_file`), read by the embedded broker too |
//! | `broker/acl` | every account's rights ([`mesh_core::grants`]), Mosquitto's format (`acl_file`), read by the embedded broker too |
//! | `broker/mosquitto.conf` | a Mosquitto listener that uses both, with anonymous clients refused |
//! | `broker.toml` | a `mesh broker --config` / `mesh up --config` file that uses both |
//! | `accounts/<operator>.toml` | an operator's account (`--operator`): it reads the whole namespace, for `mesh tail` and `mesh send` over the bus |
//! | `accounts/<name>.toml` | a `mesh agent <name> --config` / `mesh gateway --config` file: the namespace and the broker URL with that account's password (and for a gateway, its TLS files) |
//! | `keys/<account>.pem` | each agent's and gateway's card-signing key (ES256, PKCS#8 PEM), in its account file |
//! | `keys/agents.jwks.json` | every agent's public key: the gateways' trust store (a card that does not verify is not served) |
//! | `keys/<gateway>.jwks.json` | a gateway's public key, for clients to pin (it also serves it at `/.well-known/jwks.json`) |
//! | `clients/<client>.key` | an API key of the gateways (`Authorization: Bearer <key>`), one per `--client` (`client` by default) |
//! | `tls/ca.pem` | the CA that signed the gateways' certificates: what HTTPS clients trust (its key is not kept) |
//! | `tls/<gateway>.pem`, `tls/<gateway>.key` | a gateway's certificate chain (for the `--tls-host` names, `localhost` and `127.0.0.1` by default) and its key |
//!
//! Passwords are 32 random base64url characters (192 bits). The account and key files are
//! written readable by their owner only (0600): they hold secrets.

use crate::exit::Failure;
use mesh_core::bus::BrokerUrl;
use mesh_core::card_signing::{self, SigningKey};
use mesh_core::grants::{self, Grant};
use mesh_core::topic::{Topics, is_safe_segment};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The example agents and the peers each may call (the orchestrator delegates to the others).
pub fn example_agents() -> Vec<AgentSpec> {
    mesh_example_agents::NAMES
        .iter()
        .map(|&name| AgentSpec {
            name: name.to_owned(),
            peers: if name == "orchestrator" {
                mesh_example_agents::NAMES
                    .iter()
                    .filter(|&&peer| peer != name)
                    .map(|&peer| peer.to_owned())
                    .collect()
            } else {
                Vec::new()
            },
        })
        .collect()
}

/// The client that gets an API key when none is named.
pub const DEFAULT_CLIENT: &str = "client";

/// The names of the gateways' certificates when none are given.
pub fn default_tls_hosts() -> Vec<String> {
    vec!["localhost".to_owned(), "127.0.0.1".to_owned()]
}

/// An agent of the profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSpec {
    /// Its name (and its account's user name).
    pub name: String,
    /// The agents it may call.
    pub peers: Vec<String>,
}

impl AgentSpec {
    /// `name` or `name=peer,peer` (the `--agent` flag).
    pub fn parse(text: &str) -> Result<AgentSpec, String> {
        let (name, peers) = match text.split_once('=') {
            Some((name, peers)) => (
                name,
                peers
                    .split(',')
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
            None => (text, Vec::new()),
        };
        Ok(AgentSpec {
            name: name.trim().to_owned(),
            peers,
        })
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct ProfileSpec {
    /// The namespace the ACL is written for.
    pub namespace: String,
    /// The broker the accounts connect to (without user info).
    pub broker_url: String,
    /// The agents.
    pub agents: Vec<AgentSpec>,
    /// The gateway deployments (each one account, shared by its instances).
    pub gateways: Vec<String>,
    /// The host names and addresses the gateways' certificates are for.
    pub tls_hosts: Vec<String>,
    /// The principals that get an API key of the gateways.
    pub clients: Vec<String>,
    /// The operators' accounts (they read the whole namespace).
    pub operators: Vec<String>,
}

/// What an account is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Agent,
    Gateway,
    Operator,
}

/// The paths of a generated profile.
#[derive(Debug, Clone)]
pub struct Profile {
    dir: PathBuf,
}

impl Profile {
    /// The profile in `dir` (generated or not).
    pub fn at(dir: &Path) -> Profile {
        Profile {
            dir: dir.to_owned(),
        }
    }

    /// Whether a profile was generated there.
    pub fn exists(&self) -> bool {
        self.password_file().exists()
    }

    /// The card-signing key of account `name`.
    pub fn signing_key(&self, name: &str) -> PathBuf {
        self.dir.join("keys").join(format!("{name}.pem"))
    }

    /// Every agent's public key: the gateways' trust store.
    pub fn agent_keys(&self) -> PathBuf {
        self.dir.join("keys").join("agents.jwks.json")
    }

    /// The API key of client `name`.
    pub fn client_key(&self, name: &str) -> PathBuf {
        self.dir.join("clients").join(format!("{name}.key"))
    }

    /// The gateway's API keys (`principal=key`), from gateway `name`'s config file.
    pub fn api_keys(&self, name: &str) -> Result<Vec<String>, Failure> {
        Ok(self
            .account_table(name)?
            .get("api_keys")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(toml::Value::as_str)
            .map(str::to_owned)
            .collect())
    }

    /// The CA HTTPS clients of the gateways trust.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("tls").join("ca.pem")
    }

    /// Gateway `name`'s certificate chain and key.
    pub fn gateway_tls(&self, name: &str) -> mesh_gateway::TlsFiles {
        let tls = self.dir.join("tls");
        mesh_gateway::TlsFiles {
            cert_file: tls.join(format!("{name}.pem")),
            key_file: tls.join(format!("{name}.key")),
        }
    }

    /// Mosquitto's `password_file`, read by the embedded broker too.
    pub fn password_file(&self) -> PathBuf {
        self.dir.join("broker").join("passwords")
    }

    /// Mosquitto's `acl_file`, read by the embedded broker too.
    pub fn acl_file(&self) -> PathBuf {
        self.dir.join("broker").join("acl")
    }

    /// The `mesh --config` file of account `name`.
    pub fn account_config(&self, name: &str) -> PathBuf {
        self.dir.join("accounts").join(format!("{name}.toml"))
    }

    /// The broker URL (with the password) account `name` connects with, from its config file.
    pub fn account_url(&self, name: &str) -> Result<String, Failure> {
        self.account_table(name)?
            .get("broker_url")
            .and_then(toml::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| {
                Failure::Usage(format!(
                    "{}: no broker_url",
                    self.account_config(name).display()
                ))
            })
    }

    /// Account `name`'s config file, read.
    fn account_table(&self, name: &str) -> Result<toml::Table, Failure> {
        let path = self.account_config(name);
        let unusable = |e: String| Failure::Usage(format!("{}: {e}", path.display()));
        let text = std::fs::read_to_string(&path).map_err(|e| unusable(e.to_string()))?;
        toml::from_str(&text).map_err(|e: toml::de::Error| unusable(e.to_string()))
    }

    /// Account `name` on the broker of `broker_url` (its user and password there; on each
    /// node of a comma-separated list).
    pub fn account_on(&self, name: &str, broker_url: &str) -> Result<String, Failure> {
        let account = BrokerUrl::parse(&self.account_url(name)?)
            .map_err(|e| Failure::Usage(format!("{}: {e}", self.account_config(name).display())))?;
        let (Some(user), Some(password)) = (&account.username, &account.password) else {
            return Err(Failure::Usage(format!(
                "{}: its broker_url has no user and password",
                self.account_config(name).display()
            )));
        };
        let mut nodes = Vec::new();
        for node in broker_url.split(',').map(str::trim) {
            let broker = BrokerUrl::parse(node).map_err(|e| Failure::Usage(e.to_string()))?;
            nodes.push(with_credentials(&broker, user, password));
        }
        Ok(nodes.join(","))
    }
}

/// Checks the names and peers of `spec`: safe segments, no name twice, peers that exist.
fn check(spec: &ProfileSpec) -> Result<(), Failure> {
    let mut names = std::collections::BTreeSet::new();
    let all = spec
        .agents
        .iter()
        .map(|a| a.name.as_str())
        .chain(spec.gateways.iter().map(String::as_str))
        .chain(spec.operators.iter().map(String::as_str));
    for name in all {
        if !is_safe_segment(name) || name.starts_with('_') {
            return Err(Failure::Usage(format!(
                "{name:?} cannot be an account: names are 1 to 64 bytes without / + # . * > $, \
                 whitespace or control characters, and do not start with _"
            )));
        }
        if !names.insert(name) {
            return Err(Failure::Usage(format!(
                "{name:?} is named twice (agents and gateways share one set of accounts)"
            )));
        }
    }
    for agent in &spec.agents {
        for peer in &agent.peers {
            if !spec.agents.iter().any(|a| &a.name == peer) {
                return Err(Failure::Usage(format!(
                    "agent {} may call {peer:?}, which is not an agent of the profile",
                    agent.name
                )));
            }
        }
    }
    if spec.agents.is_empty() && spec.gateways.is_empty() {
        return Err(Failure::Usage(
            "a profile needs at least one account".into(),
        ));
    }
    Ok(())
}

/// Writes the profile `spec` describes into `dir`. Refuses a directory that already has one
/// unless `force`.
pub fn generate(spec: &ProfileSpec, dir: &Path, force: bool) -> Result<Profile, Failure> {
    check(spec)?;
    let profile = Profile::at(dir);
    if profile.exists() && !force {
        return Err(Failure::Usage(format!(
            "{} already holds a profile: use it, or give --force to replace it (every password \
             changes)",
            dir.display()
        )));
    }
    let base = BrokerUrl::parse(&spec.broker_url)
        .map_err(|e| Failure::Usage(format!("{e} (--broker-url)")))?;
    if base.username.is_some() {
        return Err(Failure::Usage(
            "give --broker-url without a user: each account gets its own".into(),
        ));
    }
    let topics = Topics::new(spec.namespace.clone()).map_err(|e| Failure::Usage(e.to_string()))?;

    let mut passwords = String::new();
    let mut acl = String::from(
        "# Generated by `mesh secure`: each account's rights, and nothing for anonymous clients.\n",
    );
    let mut accounts = Vec::new();
    for agent in &spec.agents {
        let peers: Vec<&str> = agent.peers.iter().map(String::as_str).collect();
        let grants = grants::agent_grants(&topics, &agent.name, &peers)
            .map_err(|e| Failure::Usage(e.to_string()))?;
        accounts.push((agent.name.clone(), grants, Role::Agent));
    }
    for gateway in &spec.gateways {
        let grants =
            grants::gateway_grants(&topics, gateway).map_err(|e| Failure::Usage(e.to_string()))?;
        accounts.push((gateway.clone(), grants, Role::Gateway));
    }
    for operator in &spec.operators {
        let grants = grants::operator_grants(&topics, operator)
            .map_err(|e| Failure::Usage(e.to_string()))?;
        accounts.push((operator.clone(), grants, Role::Operator));
    }
    let mut configs = Vec::new();
    for (name, grants, role) in &accounts {
        let password = mesh_broker::random_password();
        let _ = writeln!(
            passwords,
            "{name}:{}",
            mesh_broker::hash_password(&password)
        );
        write_acl(&mut acl, name, grants);
        let url = with_credentials(&base, name, &password);
        let mut config = format!(
            "# `mesh {} --config` file of account {name} (generated by `mesh secure`).\n\
             namespace = {}\nbroker_url = {}\n",
            match role {
                Role::Agent => "agent <name>",
                Role::Gateway => "gateway",
                Role::Operator => "tail|send|agents",
            },
            quote(&spec.namespace),
            quote(&url)
        );
        if *role != Role::Agent {
            // A gateway's (or an operator's) response topics and registry marker: its name.
            let _ = writeln!(config, "gateway_name = {}", quote(name));
        }
        configs.push((name.clone(), config, *role));
    }

    let broker_dir = dir.join("broker");
    let accounts_dir = dir.join("accounts");
    let tls_dir = dir.join("tls");
    let clients_dir = dir.join("clients");
    let keys_dir = dir.join("keys");
    for d in [
        &broker_dir,
        &accounts_dir,
        &tls_dir,
        &clients_dir,
        &keys_dir,
    ] {
        std::fs::create_dir_all(d).map_err(|e| Failure::Usage(format!("{}: {e}", d.display())))?;
    }
    write_file(&profile.password_file(), &passwords, true)?;
    write_file(&profile.acl_file(), &acl, false)?;
    write_file(
        &broker_dir.join("mosquitto.conf"),
        &mosquitto_conf(&profile, base.port, owner_is_root(&profile.password_file())),
        false,
    )?;
    write_file(
        &dir.join("broker.toml"),
        &format!(
            "# `mesh broker --config` / `mesh up --config` file (generated by `mesh secure`).\n\
             namespace = {}\nbroker_password_file = {}\nbroker_acl_file = {}\n",
            quote(&spec.namespace),
            quote(&absolute(&profile.password_file()).display().to_string()),
            quote(&absolute(&profile.acl_file()).display().to_string()),
        ),
        false,
    )?;
    let mut api_keys = Vec::new();
    for client in &spec.clients {
        if !is_safe_segment(client) {
            return Err(Failure::Usage(format!(
                "{client:?} cannot name a client (--client)"
            )));
        }
        let key = mesh_broker::random_password();
        write_file(&profile.client_key(client), &format!("{key}\n"), true)?;
        api_keys.push(quote(&format!("{client}={key}")));
    }
    // Each account's card-signing key; the agents' public keys are the gateways' trust store.
    let mut agent_jwks = Vec::new();
    for (name, _, role) in &configs {
        if *role == Role::Operator {
            continue;
        }
        let key = SigningKey::generate()
            .map_err(|e| Failure::Other(format!("cannot make a signing key: {e}")))?;
        write_file(&profile.signing_key(name), &key.to_pem(), true)?;
        if spec.gateways.contains(name) {
            let jwks = card_signing::jwks([key.public_jwk()]);
            write_file(
                &keys_dir.join(format!("{name}.jwks.json")),
                &format!("{jwks:#}\n"),
                false,
            )?;
        } else {
            agent_jwks.push(key.public_jwk());
        }
    }
    write_file(
        &profile.agent_keys(),
        &format!("{:#}\n", card_signing::jwks(agent_jwks)),
        false,
    )?;
    let tls = Certificates::generate(&spec.tls_hosts, &spec.gateways)?;
    write_file(&profile.ca_file(), &tls.ca_pem, false)?;
    for (name, mut config, role) in configs {
        let key_file = quote(&absolute(&profile.signing_key(&name)).display().to_string());
        if role == Role::Operator {
            write_file(&profile.account_config(&name), &config, true)?;
            continue;
        }
        if role == Role::Gateway {
            let _ = writeln!(
                config,
                "gateway_signing_key = {key_file}\ntrusted_keys = {}",
                quote(&absolute(&profile.agent_keys()).display().to_string())
            );
            if !api_keys.is_empty() {
                let _ = writeln!(config, "api_keys = [{}]", api_keys.join(", "));
            }
        } else {
            let _ = writeln!(config, "signing_key = {key_file}");
        }
        if let Some((chain, key)) = tls
            .gateways
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, c, k)| (c, k))
        {
            let mesh_gateway::TlsFiles {
                cert_file,
                key_file,
            } = profile.gateway_tls(&name);
            write_file(&cert_file, chain, false)?;
            write_file(&key_file, key, true)?;
            let _ = writeln!(
                config,
                "tls_cert = {}\ntls_key = {}",
                quote(&absolute(&cert_file).display().to_string()),
                quote(&absolute(&key_file).display().to_string())
            );
        }
        write_file(&profile.account_config(&name), &config, true)?;
    }
    Ok(profile)
}

/// The CA (as PEM) and each gateway's certificate chain and key (as PEM).
struct Certificates {
    ca_pem: String,
    gateways: Vec<(String, String, String)>,
}

impl Certificates {
    fn generate(hosts: &[String], gateways: &[String]) -> Result<Certificates, Failure> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };
        let failed = |e: rcgen::Error| Failure::Other(format!("cannot make the certificates: {e}"));
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "mesh secure profile CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(failed)?)
            .map_err(failed)?;
        let mut certificates = Certificates {
            ca_pem: ca.pem(),
            gateways: Vec::new(),
        };
        for gateway in gateways {
            let mut params = CertificateParams::new(hosts.to_vec())
                .map_err(|e| Failure::Usage(format!("{e} (--tls-host)")))?;
            params
                .distinguished_name
                .push(DnType::CommonName, gateway.as_str());
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let key = KeyPair::generate().map_err(failed)?;
            let certificate = params.signed_by(&key, &ca).map_err(failed)?;
            certificates.gateways.push((
                gateway.clone(),
                format!("{}{}", certificate.pem(), certificates.ca_pem),
                key.serialize_pem(),
            ));
        }
        Ok(certificates)
    }
}

fn write_acl(acl: &mut String, user: &str, grants: &[Grant]) {
    let _ = writeln!(acl, "\nuser {user}");
    for grant in grants {
        let _ = writeln!(acl, "topic {} {}", grant.right.as_str(), grant.filter);
    }
}

/// Whether `path` belongs to root (Mosquitto started as root then runs as the user
/// `mosquitto` unless told otherwise, and could not read the owner-only password file).
fn owner_is_root(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).is_ok_and(|m| m.uid() == 0)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

fn mosquitto_conf(profile: &Profile, port: u16, as_root: bool) -> String {
    let user = if as_root {
        "# The password file is root's and readable by its owner only: Mosquitto started as\n\
         # root keeps running as root to read it (chown the files and change this to run it\n\
         # as another user).\nuser root\n"
    } else {
        ""
    };
    format!(
        "# A Mosquitto 2 listener for the profile (generated by `mesh secure`):\n\
         #   mosquitto -c {}\n\
         {user}\
         per_listener_settings false\n\
         listener {port}\n\
         allow_anonymous false\n\
         password_file {}\n\
         acl_file {}\n\
         set_tcp_nodelay true\n\
         max_packet_size 16777216\n",
        absolute(&profile.dir.join("broker").join("mosquitto.conf")).display(),
        absolute(&profile.password_file()).display(),
        absolute(&profile.acl_file()).display(),
    )
}

/// `base` with `user:password@` (both URL-safe: names are safe segments, passwords base64url).
fn with_credentials(base: &BrokerUrl, user: &str, password: &str) -> String {
    let scheme = if base.tls { "mqtts" } else { "mqtt" };
    let host = if base.host.contains(':') {
        format!("[{}]", base.host)
    } else {
        base.host.clone()
    };
    format!(
        "{scheme}://{}:{}@{host}:{}",
        percent_encode(user),
        percent_encode(password),
        base.port
    )
}

/// Percent-encodes what a URL's user info cannot hold as is.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A TOML basic string (JSON's escapes are TOML's).
fn quote(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

fn write_file(path: &Path, content: &str, secret: bool) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::Usage(format!("{}: {e}", path.display()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(if secret { 0o600 } else { 0o644 });
    }
    let mut file = options.open(path).map_err(fail)?;
    #[cfg(unix)]
    if secret {
        // A file that existed keeps its mode through `open`: narrow it.
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(fail)?;
    }
    file.write_all(content.as_bytes()).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_specs_parse() {
        assert_eq!(
            AgentSpec::parse("orchestrator=writer, echo").unwrap(),
            AgentSpec {
                name: "orchestrator".into(),
                peers: vec!["writer".into(), "echo".into()]
            }
        );
        assert_eq!(
            AgentSpec::parse("echo").unwrap().peers,
            Vec::<String>::new()
        );
    }

    #[test]
    fn names_and_peers_are_checked() {
        let spec = |agents: Vec<AgentSpec>, gateways: &[&str]| ProfileSpec {
            namespace: "mesh".into(),
            broker_url: "mqtt://127.0.0.1:1884".into(),
            tls_hosts: vec!["localhost".into()],
            clients: vec!["client".into()],
            operators: Vec::new(),
            agents,
            gateways: gateways.iter().map(|g| g.to_string()).collect(),
        };
        let agent = |text: &str| AgentSpec::parse(text).unwrap();
        assert!(check(&spec(vec![agent("echo")], &["gateway"])).is_ok());
        for bad in [
            spec(vec![agent("echo"), agent("echo")], &[]),
            spec(vec![agent("echo")], &["echo"]),
            spec(vec![agent("a/b")], &[]),
            spec(vec![agent("_registry")], &[]),
            spec(vec![agent("o=ghost")], &[]),
            spec(vec![], &[]),
        ] {
            assert!(check(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn credentials_go_into_the_url() {
        let base = BrokerUrl::parse("mqtts://broker.example:8883").unwrap();
        let url = with_credentials(&base, "ec@ho", "pw");
        assert_eq!(url, "mqtts://ec%40ho:pw@broker.example:8883");
        let parsed = BrokerUrl::parse(&url).unwrap();
        assert_eq!(parsed.username.as_deref(), Some("ec@ho"));
        assert_eq!(parsed.password.as_deref(), Some("pw"));
        assert_eq!(mesh_broker::random_password().len(), 32);
        assert_ne!(
            mesh_broker::random_password(),
            mesh_broker::random_password()
        );
    }
}
