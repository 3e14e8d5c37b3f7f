//! CLI exit codes and file outputs through `convene_evidence::cli::run`.

use convene_evidence::cli::{
    run, EXIT_INTAKE, EXIT_NOT_ALLOWED, EXIT_OK, EXIT_REJECTED, EXIT_USAGE,
};
use serde_json::{json, Value};
use std::path::Path;

fn ev(args: &[&str]) -> i32 {
    let mut v = vec!["evidence".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    run(v)
}

fn write(p: &Path, v: &Value) -> String {
    std::fs::write(p, v.to_string()).unwrap();
    p.display().to_string()
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn intake(tool: &str, params: Value, trace: &str) -> Value {
    json!({"intake_version":"1.3","agent_id":"agent-001","tool":tool,"params":params,
           "timestamp":1722384000.0,"trace_id":trace})
}

#[test]
fn cli_exit_codes_and_outputs() {
    let d = tempfile::tempdir().unwrap();
    let p = |n: &str| d.path().join(n).display().to_string();
    assert_eq!(ev(&["keygen", "--out", &p("key.json")]), EXIT_OK);
    let kf = read(Path::new(&p("key.json")));
    assert_eq!(kf["fingerprint"].as_str().unwrap().len(), 16);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(p("key.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "private key file must be owner-only");
    }

    let allow = write(
        &d.path().join("allow.json"),
        &intake("search_web", json!({"query":"weather"}), "t1"),
    );
    let deny = write(
        &d.path().join("deny.json"),
        &intake("shell_exec", json!({"command":"rm -rf /"}), "t2"),
    );
    let mut bad = intake("search_web", json!({}), "t3");
    bad.as_object_mut().unwrap().remove("tool");
    let bad = write(&d.path().join("bad.json"), &bad);
    let store = p("ev.db");
    let k = p("key.json");

    assert_eq!(
        ev(&[
            "issue",
            "--key",
            &k,
            "--intake",
            &allow,
            "--out",
            &p("r1.json"),
            "--bundle",
            &p("b1.json"),
            "--store",
            &store
        ]),
        EXIT_OK
    );
    assert_eq!(
        ev(&[
            "issue",
            "--key",
            &k,
            "--intake",
            &deny,
            "--out",
            &p("r2.json"),
            "--bundle",
            &p("b2.json"),
            "--store",
            &store
        ]),
        EXIT_NOT_ALLOWED
    );
    assert_eq!(
        ev(&[
            "issue",
            "--key",
            &k,
            "--intake",
            &bad,
            "--out",
            &p("never.json")
        ]),
        EXIT_INTAKE
    );
    assert!(
        !Path::new(&p("never.json")).exists(),
        "no receipt on intake failure"
    );
    assert_eq!(read(Path::new(&p("r2.json")))["verdict"], "deny");
    assert_eq!(
        read(Path::new(&p("r2.json")))["sequence"],
        1,
        "sequence continues in the store"
    );

    let aud = "https://convene.local/executor";
    let replay = p("replay.db");
    let verify = |r: &str, i: &str, aud: &str| {
        ev(&[
            "verify",
            "--receipt",
            r,
            "--key",
            &k,
            "--audience",
            aud,
            "--intake",
            i,
            "--replay-db",
            &replay,
        ])
    };
    assert_eq!(verify(&p("r1.json"), &allow, aud), EXIT_OK);
    assert_eq!(
        verify(&p("r1.json"), &allow, aud),
        EXIT_REJECTED,
        "replayed"
    );
    assert_eq!(verify(&p("r2.json"), &allow, aud), EXIT_REJECTED, "binding");
    assert_eq!(
        verify(&p("r2.json"), &deny, "https://elsewhere"),
        EXIT_REJECTED,
        "audience"
    );
    assert_eq!(ev(&["verify", "--receipt", &p("r1.json")]), EXIT_USAGE);
    assert_eq!(ev(&["frobnicate"]), EXIT_USAGE);
    assert_eq!(run(vec!["nonsense".into()]), EXIT_USAGE);

    // Chain: three hops linked with --parent, verify, prune, tamper.
    let mut prev: Option<String> = None;
    let mut hops = Vec::new();
    for h in 0..3 {
        let i = write(
            &d.path().join(format!("h{h}.json")),
            &intake("delegate", json!({"hop":h}), &format!("c{h}")),
        );
        let out = p(&format!("h{h}.r.json"));
        let mut args = vec![
            "issue", "--key", &k, "--intake", &i, "--out", &out, "--store", &store,
        ];
        let pv;
        if let Some(x) = &prev {
            pv = x.clone();
            args.extend(["--parent", pv.as_str()]);
        }
        assert_eq!(ev(&args), EXIT_OK);
        prev = Some(out.clone());
        hops.push(out);
    }
    let chain = p("chain.json");
    let mut args = vec!["chain", "build", "--out", &chain];
    args.extend(hops.iter().map(String::as_str));
    assert_eq!(ev(&args), EXIT_OK);
    assert_eq!(
        ev(&["chain", "verify", "--chain", &chain, "--key", &k]),
        EXIT_OK
    );
    assert_eq!(
        ev(&["chain", "verify", "--chain", &chain, "--key", &k, "--mode", "spot", "--hop", "2"]),
        EXIT_OK
    );
    assert_eq!(
        ev(&[
            "chain",
            "prune",
            "--chain",
            &chain,
            "--hop",
            "1",
            "--out",
            &p("pruned.json")
        ]),
        EXIT_OK
    );
    assert_eq!(
        ev(&["chain", "verify", "--chain", &p("pruned.json"), "--key", &k]),
        EXIT_OK
    );
    assert_eq!(
        ev(&[
            "chain",
            "prune",
            "--chain",
            &chain,
            "--hop",
            "0",
            "--out",
            &p("x.json")
        ]),
        5
    );
    let mut c = read(Path::new(&chain));
    c["receipts"][2]["previous_receipt_hash"] = json!(format!("sha256:{}", "0".repeat(64)));
    let tampered = write(&d.path().join("tampered.json"), &c);
    assert_eq!(
        ev(&["chain", "verify", "--chain", &tampered, "--key", &k]),
        EXIT_REJECTED
    );
    let other = p("other.json");
    assert_eq!(ev(&["keygen", "--out", &other]), EXIT_OK);
    assert_eq!(
        ev(&["chain", "verify", "--chain", &chain, "--key", &other]),
        EXIT_REJECTED,
        "unpinned key"
    );

    // Envelopes (cross-org, offline).
    let env = p("env.json");
    assert_eq!(
        ev(&[
            "envelope",
            "wrap",
            "--parent",
            &hops[0],
            "--child-trace",
            "x1",
            "--reason",
            "delegate",
            "--sender",
            "https://org-a.example",
            "--receiver",
            "https://org-b.example",
            "--key",
            &k,
            "--out",
            &env,
        ]),
        EXIT_OK
    );
    let verify_env = |e: &str, recv: &str| {
        ev(&[
            "envelope",
            "verify",
            "--envelope",
            e,
            "--key",
            &k,
            "--receiver",
            recv,
        ])
    };
    assert_eq!(verify_env(&env, "https://org-b.example"), EXIT_OK);
    assert_eq!(verify_env(&env, "https://org-c.example"), EXIT_REJECTED);
    let mut e = read(Path::new(&env));
    e["original_receipt"]
        .as_object_mut()
        .unwrap()
        .remove("signature");
    let stripped = write(&d.path().join("stripped.json"), &e);
    assert_eq!(
        verify_env(&stripped, "https://org-b.example"),
        EXIT_REJECTED
    );

    // Manifest and export.
    assert_eq!(
        ev(&["manifest", "--key", &k, "--out", &p("manifest.json")]),
        EXIT_OK
    );
    assert_eq!(
        read(Path::new(&p("manifest.json")))["manifest_version"],
        "1.0"
    );
    let out = p("vectors");
    assert_eq!(
        ev(&[
            "export",
            "--profile",
            "l1-1.1",
            "--key",
            &k,
            "--out",
            &out,
            "--case",
            "01-allow",
            &p("b1.json")
        ]),
        EXIT_OK
    );
    assert_eq!(
        ev(&[
            "export",
            "--profile",
            "l1-1.1",
            "--key",
            &k,
            "--out",
            &out,
            "--case",
            "02-deny",
            &p("b2.json")
        ]),
        EXIT_OK
    );
    assert_eq!(
        ev(&[
            "export",
            "--profile",
            "l0",
            "--key",
            &k,
            "--out",
            &out,
            "--case",
            "x",
            &p("b1.json")
        ]),
        EXIT_USAGE
    );
    let r = read(&d.path().join("vectors/02-deny/receipt-01.json"));
    assert_eq!(r["verdict"], "block");
    assert!(convene_evidence::l1::check(&r).is_empty());
    let m = read(&d.path().join("vectors/manifest.json"));
    let files = m["files"].as_object().unwrap();
    assert!(
        files.contains_key("01-allow/receipt-01.json")
            && files.contains_key("02-deny/expected.json")
    );
    for (rel, h) in files {
        let bytes = std::fs::read(d.path().join("vectors").join(rel)).unwrap();
        assert_eq!(
            convene_evidence::jcs::sha256_hex(&bytes),
            h.as_str().unwrap(),
            "{rel}"
        );
    }
}
