//! The worker Lambda function (cargo feature `lambda`): see `punctual::lambda::worker` and docs/DEPLOY.md.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    punctual::lambda::worker::main().await
}
