# Defaults that the code also has are checked against it by tests/terraform.rs: keep them equal.

variable "prefix" {
  description = "Prefix of every table, queue, function and role name; the code's default is punctual- (store/src/aws/names.rs DEFAULT_PREFIX). Give the functions the same value (PUNCTUAL_AWS_PREFIX)."
  type        = string
  default     = "punctual-"

  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{0,40}$", var.prefix))
    error_message = "prefix: at most 40 characters of A-Z a-z 0-9 - _ (the code refuses others)."
  }
}

variable "max_receive_count" {
  description = "Receives of one message before SQS moves it to the DLQ (the ready queue's redrive policy). Same default as `punctual init --max-receive-count`."
  type        = number
  default     = 10

  validation {
    condition     = var.max_receive_count >= 1 && var.max_receive_count <= 1000
    error_message = "max_receive_count: between 1 and 1000 (SQS's limit)."
  }
}

variable "ready_retention_seconds" {
  description = "How long an undelivered message stays in the ready queue (4 days, SQS's default). Must stay below the DLQ's."
  type        = number
  default     = 345600
}

variable "dlq_retention_seconds" {
  description = "How long a dead letter waits for an operator: 14 days, SQS's maximum, as `punctual init` creates it."
  type        = number
  default     = 1209600
}

variable "kms_key_arn" {
  description = "A customer managed KMS key for the tables, queues, function environments and logs. Null: the module creates one (with rotation) when create_kms_key is true."
  type        = string
  default     = null
}

variable "create_kms_key" {
  description = "Create a customer managed KMS key when kms_key_arn is null. False and no kms_key_arn: AWS owned keys (DynamoDB default encryption, SQS-managed SSE)."
  type        = bool
  default     = true
}

variable "artifacts_dir" {
  description = "Directory holding the three Lambda zips built by `cargo lambda build --release --output-format zip` (see docs/DEPLOY.md): punctual-lambda-{worker,api,poller}/bootstrap.zip."
  type        = string
}

variable "architecture" {
  description = "Lambda architecture of the artifacts: x86_64 or arm64."
  type        = string
  default     = "x86_64"
}

variable "worker_timeout_seconds" {
  description = "Worker function timeout. Must exceed run_timeout_ms (a claim must be written before the function is cut)."
  type        = number
  default     = 60
}

variable "run_timeout_ms" {
  description = "How long a worker's claim holds a task (PUNCTUAL_RUN_TIMEOUT_MS); the default is the worker's (30 s)."
  type        = number
  default     = 30000
}

variable "http_timeout_ms" {
  description = "Timeout of one webhook call (PUNCTUAL_HTTP_TIMEOUT_MS); below run_timeout_ms."
  type        = number
  default     = 10000
}

variable "worker_batch_size" {
  description = "Records per worker invocation (the event source's batch size, at most 10 without a batching window)."
  type        = number
  default     = 10
}

variable "worker_max_concurrency" {
  description = "Most concurrent worker invocations the event source starts (2 to 1000)."
  type        = number
  default     = 20
}

variable "worker_reserved_concurrency" {
  description = "Reserved concurrency of the worker function."
  type        = number
  default     = 20
}

variable "api_reserved_concurrency" {
  description = "Reserved concurrency of the API function."
  type        = number
  default     = 20
}

variable "poller_timeout_seconds" {
  description = "Poller function timeout: an invocation polls for poller_run_for_ms, then releases its leases at least poller_release_margin_ms before this."
  type        = number
  default     = 90
}

variable "poller_run_for_ms" {
  description = "How long one poller invocation polls (src/lambda/poller.rs DEFAULT_RUN_FOR_MS): a little more than the schedule's minute, so invocations overlap and hand shards over by release."
  type        = number
  default     = 65000
}

variable "poller_release_margin_ms" {
  description = "Stop polling this long before the function's deadline (src/lambda/poller.rs DEFAULT_RELEASE_MARGIN_MS)."
  type        = number
  default     = 10000
}

variable "memory_mb" {
  description = "Memory of each function, MB."
  type        = map(number)
  default = {
    worker = 256
    api    = 256
    poller = 256
  }
}

variable "api_keys_json" {
  description = "The API keys as a JSON key file with SHA-256 digests only: {\"keys\":[{\"name\":\"ops\",\"role\":\"admin\",\"sha256\":\"...\"}]} (PUNCTUAL_API_KEYS_JSON)."
  type        = string
  sensitive   = true
}

variable "webhook_secret" {
  description = "The secret signing every webhook call (PUNCTUAL_WEBHOOK_SECRET)."
  type        = string
  sensitive   = true
}

variable "session_secret" {
  description = "The console's session signing secret, at least 16 bytes, shared by every API instance (PUNCTUAL_SESSION_SECRET)."
  type        = string
  sensitive   = true
}

variable "log_retention_days" {
  description = "Retention of the functions' log groups."
  type        = number
  default     = 365
}

variable "alarm_actions" {
  description = "ARNs (SNS topics) notified when an alarm fires or clears."
  type        = list(string)
  default     = []
}

variable "dlq_depth_threshold" {
  description = "Alarm when the DLQ holds more than this many letters."
  type        = number
  default     = 0
}

variable "oldest_message_age_threshold_seconds" {
  description = "Alarm when the oldest message of the ready queue is older than this: workers are not keeping up."
  type        = number
  default     = 300
}

variable "fire_lag_threshold_ms" {
  description = "Alarm when the p99 fire lag (claim time minus due time, metric punctual/FireLagMs logged by the worker) exceeds this over 5 minutes."
  type        = number
  default     = 10000
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
