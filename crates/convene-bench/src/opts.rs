//! Command-line options.

use std::path::PathBuf;

const USAGE: &str = "\
convene-bench: durable-send, concurrency and replay benchmark (Convene vs CCCC)

USAGE: convene-bench [OPTIONS]

OPTIONS:
  --n N              sequential sends per method (default 2000; warm-up 100)
  --quick            CI smoke: small sizes, Convene only, < 20 s
  --convene PATH     convene binary (default: `convene` next to this binary)
  --cccc PATH        cccc binary (default: `cccc` on PATH, if any)
  --skip-cccc        do not run CCCC
  --replay N         events pre-loaded into the Convene replay group (default 100000)
  --conc-total N     messages per concurrency level (default 4000)
  --levels LIST      concurrency levels (default 1,4,16,64)
  --json-out FILE    also write all results as JSON
  --keep             keep the temporary homes (daemon logs, databases)
  -h, --help         this text";

/// What to run and how much; see `USAGE`.
#[derive(Debug, Clone)]
pub struct Opts {
    pub n: usize,
    pub warmup: usize,
    pub fsync_n: usize,
    pub levels: Vec<usize>,
    pub conc_total: usize,
    pub replay: usize,
    pub preload_clients: usize,
    pub quick: bool,
    pub convene: Option<PathBuf>,
    pub cccc: Option<PathBuf>,
    pub skip_cccc: bool,
    pub json_out: Option<PathBuf>,
    pub keep: bool,
}

/// Parses the command line; `--quick` sets small sizes, explicit sizes override them.
pub fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        n: 2000,
        warmup: 100,
        fsync_n: 2000,
        levels: vec![1, 4, 16, 64],
        conc_total: 4000,
        replay: 100_000,
        preload_clients: 64,
        quick: false,
        convene: None,
        cccc: None,
        skip_cccc: false,
        json_out: None,
        keep: false,
    };
    let mut n_set = None;
    let mut replay_set = None;
    let mut conc_set = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let num = |s: String, name: &str| {
            s.parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: not a positive integer: {s}"))
        };
        match a.as_str() {
            "--n" => n_set = Some(num(val("--n")?, "--n")?),
            "--replay" => replay_set = Some(num(val("--replay")?, "--replay")?),
            "--conc-total" => conc_set = Some(num(val("--conc-total")?, "--conc-total")?),
            "--levels" => {
                let v = val("--levels")?;
                o.levels = v
                    .split(',')
                    .map(|x| num(x.trim().to_string(), "--levels"))
                    .collect::<Result<_, _>>()?;
            }
            "--quick" => o.quick = true,
            "--convene" => o.convene = Some(PathBuf::from(val("--convene")?)),
            "--cccc" => o.cccc = Some(PathBuf::from(val("--cccc")?)),
            "--skip-cccc" => o.skip_cccc = true,
            "--json-out" => o.json_out = Some(PathBuf::from(val("--json-out")?)),
            "--keep" => o.keep = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown option {other}\n\n{USAGE}")),
        }
    }
    if o.quick {
        o.n = 200;
        o.warmup = 20;
        o.fsync_n = 200;
        o.conc_total = 400;
        o.replay = 5000;
        o.preload_clients = 16;
        o.skip_cccc = true;
    }
    if let Some(n) = n_set {
        o.n = n;
    }
    if let Some(n) = replay_set {
        o.replay = n;
    }
    if let Some(n) = conc_set {
        o.conc_total = n;
    }
    Ok(o)
}
