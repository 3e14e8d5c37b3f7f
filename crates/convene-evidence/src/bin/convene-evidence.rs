//! Thin binary over `convene_evidence::cli::run` (first argument: "evidence" or "verifier").

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(convene_evidence::cli::run(args));
}
