//! `sluice-mock [ADDR] [--curious]`: the mock provider as a process, for the SDK and LiteLLM
//! checks and the load harness. Prints `listening on http://ADDR` once ready, then serves until
//! killed. `--curious` answers every request as a model that asks for the first marker's
//! original (a gateway in between does not pass the per-request header).

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let addr = match addr.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("sluice-mock: bad address {addr}: {err}");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mock = integration_tests::mock::Mock::start_on(addr).await;
        mock.set_curious(std::env::args().any(|a| a == "--curious"));
        println!("listening on {}", mock.url());
        std::future::pending::<()>().await;
    });
}
