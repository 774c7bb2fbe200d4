//! The api Lambda function (cargo feature `lambda`): see `punctual::lambda::api` and docs/DEPLOY.md.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    punctual::lambda::api::main().await
}
