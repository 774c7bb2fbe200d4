# The three functions (src/lambda), their least-privilege roles, and what invokes them.
#
# Each role gets only the calls its code makes (store/src/aws: the SDK calls per trait method)
# and only on this deployment's resources. Every function opens the store the same way
# (AwsStore::open): GetItem of the meta item in the leases table, GetQueueUrl of both queues,
# GetQueueAttributes (redrive policy) of the ready queue.

locals {
  common_env = {
    PUNCTUAL_AWS_PREFIX = var.prefix
    RUST_LOG            = "info"
  }

  functions = {
    worker = {
      timeout  = var.worker_timeout_seconds
      reserved = var.worker_reserved_concurrency
      env = merge(local.common_env, {
        PUNCTUAL_RUN_TIMEOUT_MS  = tostring(var.run_timeout_ms)
        PUNCTUAL_HTTP_TIMEOUT_MS = tostring(var.http_timeout_ms)
        PUNCTUAL_WEBHOOK_SECRET  = var.webhook_secret
      })
    }
    api = {
      timeout  = 30
      reserved = var.api_reserved_concurrency
      env = merge(local.common_env, {
        PUNCTUAL_API_KEYS_JSON  = var.api_keys_json
        PUNCTUAL_SESSION_SECRET = var.session_secret
      })
    }
    poller = {
      timeout = var.poller_timeout_seconds
      # Invocations overlap by run_for - 60 s: at most two run at once.
      reserved = 2
      env = merge(local.common_env, {
        PUNCTUAL_POLLER_RUN_FOR_MS        = tostring(var.poller_run_for_ms)
        PUNCTUAL_POLLER_RELEASE_MARGIN_MS = tostring(var.poller_release_margin_ms)
      })
    }
  }

  policies = {
    worker = data.aws_iam_policy_document.worker.json
    api    = data.aws_iam_policy_document.api.json
    poller = data.aws_iam_policy_document.poller.json
  }

  kms_statement = local.kms_key_arn == null ? [] : [local.kms_key_arn]
}

# ---- logs ---------------------------------------------------------------------------------

resource "aws_cloudwatch_log_group" "fn" {
  for_each = local.functions

  name              = "/aws/lambda/${var.prefix}${each.key}"
  retention_in_days = var.log_retention_days
  kms_key_id        = local.kms_key_arn
  tags              = var.tags
}

# ---- roles --------------------------------------------------------------------------------

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]

    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "fn" {
  for_each = local.functions

  name               = "${var.prefix}${each.key}"
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy" "fn" {
  for_each = local.functions

  name   = "${var.prefix}${each.key}"
  role   = aws_iam_role.fn[each.key].id
  policy = local.policies[each.key]
}

# Worker: claim / complete (UpdateItem), the refused-claim check (GetItem), the meta item's
# max_due_minute when a retry goes back to the due index (UpdateItem, meta item only); the
# event source mapping receives and deletes, the worker delays (ChangeMessageVisibility) and
# dead-letters (SendMessage to the DLQ, then delete).
data "aws_iam_policy_document" "worker" {
  statement {
    sid       = "Tasks"
    actions   = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.tasks.arn]
  }

  statement {
    sid       = "MetaItemOnly"
    actions   = ["dynamodb:GetItem", "dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.leases.arn]

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:LeadingKeys"
      values   = ["meta"]
    }
  }

  statement {
    sid = "ReadyQueue"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:DeleteMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = [aws_sqs_queue.ready.arn]
  }

  statement {
    sid       = "DeadLetter"
    actions   = ["sqs:SendMessage", "sqs:GetQueueUrl"]
    resources = [aws_sqs_queue.dlq.arn]
  }

  dynamic "statement" {
    for_each = local.kms_statement
    content {
      sid       = "Key"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn["worker"].arn}:*"]
  }
}

# Poller: the due index (Query on by_due only), the mark (UpdateItem), the leases and the meta
# item (Query, UpdateItem, GetItem), its presence item (PutItem to announce itself, DeleteItem
# to withdraw it or forget a long-gone peer's), the send (SendMessage, as SendMessageBatch).
data "aws_iam_policy_document" "poller" {
  statement {
    sid       = "DueIndex"
    actions   = ["dynamodb:Query"]
    resources = ["${aws_dynamodb_table.tasks.arn}/index/by_due"]
  }

  statement {
    sid       = "Mark"
    actions   = ["dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.tasks.arn]
  }

  statement {
    sid       = "Leases"
    actions   = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.leases.arn]
  }

  statement {
    sid       = "Presence"
    actions   = ["dynamodb:PutItem", "dynamodb:DeleteItem"]
    resources = [aws_dynamodb_table.leases.arn]

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "dynamodb:LeadingKeys"
      values   = ["member"]
    }
  }

  statement {
    sid       = "Send"
    actions   = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
    resources = [aws_sqs_queue.ready.arn]
  }

  statement {
    sid       = "DlqUrl"
    actions   = ["sqs:GetQueueUrl"]
    resources = [aws_sqs_queue.dlq.arn]
  }

  dynamic "statement" {
    for_each = local.kms_statement
    content {
      sid       = "Key"
      actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
      resources = [statement.value]
    }
  }

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn["poller"].arn}:*"]
  }
}

# API and console: create (PutItem), read (GetItem, BatchGetItem for pages), cancel /
# reschedule / replay / update (UpdateItem), lists and backlog (Query on both indexes), leases
# for /v1/shards and the meta item (GetItem, Query, UpdateItem of max_due_minute), queue depth
# (GetQueueAttributes), the DLQ's list / replay / purge (receive, hide, unhide, delete).
data "aws_iam_policy_document" "api" {
  statement {
    sid = "Tasks"
    actions = [
      "dynamodb:PutItem",
      "dynamodb:GetItem",
      "dynamodb:BatchGetItem",
      "dynamodb:UpdateItem",
    ]
    resources = [aws_dynamodb_table.tasks.arn]
  }

  statement {
    sid     = "Indexes"
    actions = ["dynamodb:Query"]
    resources = [
      "${aws_dynamodb_table.tasks.arn}/index/by_due",
      "${aws_dynamodb_table.tasks.arn}/index/by_status",
    ]
  }

  statement {
    sid       = "Leases"
    actions   = ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"]
    resources = [aws_dynamodb_table.leases.arn]
  }

  statement {
    sid       = "ReadyDepth"
    actions   = ["sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
    resources = [aws_sqs_queue.ready.arn]
  }

  statement {
    sid = "DeadLetters"
    actions = [
      "sqs:ReceiveMessage",
      "sqs:ChangeMessageVisibility",
      "sqs:DeleteMessage",
      "sqs:GetQueueAttributes",
      "sqs:GetQueueUrl",
    ]
    resources = [aws_sqs_queue.dlq.arn]
  }

  dynamic "statement" {
    for_each = local.kms_statement
    content {
      sid       = "Key"
      actions   = ["kms:Decrypt"]
      resources = [statement.value]
    }
  }

  statement {
    sid       = "Logs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.fn["api"].arn}:*"]
  }
}

# ---- functions ----------------------------------------------------------------------------

resource "aws_lambda_function" "fn" {
  for_each = local.functions
  #checkov:skip=CKV_AWS_117:No VPC is needed: the functions reach DynamoDB, SQS and webhook targets over AWS endpoints and the internet; add vpc_config in a fork if your targets are private.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile the user owns; the artifacts are built from source (docs/DEPLOY.md).
  #checkov:skip=CKV_AWS_116:No function is invoked asynchronously with a payload worth keeping: the worker's failures stay in SQS (redrive to the DLQ), the API is synchronous, a missed poller tick is replaced by the next minute's (retries are off on purpose).

  function_name                  = "${var.prefix}${each.key}"
  role                           = aws_iam_role.fn[each.key].arn
  runtime                        = "provided.al2023"
  handler                        = "bootstrap"
  architectures                  = [var.architecture]
  filename                       = "${var.artifacts_dir}/punctual-lambda-${each.key}/bootstrap.zip"
  source_code_hash               = filebase64sha256("${var.artifacts_dir}/punctual-lambda-${each.key}/bootstrap.zip")
  memory_size                    = var.memory_mb[each.key]
  timeout                        = each.value.timeout
  reserved_concurrent_executions = each.value.reserved
  kms_key_arn                    = local.kms_key_arn

  environment {
    variables = each.value.env
  }

  tracing_config {
    mode = "PassThrough"
  }

  tags = var.tags

  depends_on = [aws_cloudwatch_log_group.fn, aws_iam_role_policy.fn]
}

# Worker: the ready queue's event source, reporting partial batch failures (src/lambda/worker.rs
# lists exactly the records to redeliver; without this setting the list would be ignored).
resource "aws_lambda_event_source_mapping" "worker" {
  event_source_arn        = aws_sqs_queue.ready.arn
  function_name           = aws_lambda_function.fn["worker"].arn
  batch_size              = var.worker_batch_size
  function_response_types = ["ReportBatchItemFailures"]

  scaling_config {
    maximum_concurrency = var.worker_max_concurrency
  }
}

# Poller: one invocation a minute; each polls for poller_run_for_ms and releases its leases.
resource "aws_cloudwatch_event_rule" "poller" {
  name                = "${var.prefix}poller-every-minute"
  description         = "Starts a punctual poller invocation every minute"
  schedule_expression = "rate(1 minute)"
  tags                = var.tags
}

resource "aws_cloudwatch_event_target" "poller" {
  rule = aws_cloudwatch_event_rule.poller.name
  arn  = aws_lambda_function.fn["poller"].arn

  retry_policy {
    maximum_retry_attempts       = 0
    maximum_event_age_in_seconds = 60
  }
}

resource "aws_lambda_permission" "poller" {
  statement_id  = "AllowEventBridgeSchedule"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.fn["poller"].function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.poller.arn
}

# A failed or timed-out poller invocation is not retried: the next minute's replaces it.
resource "aws_lambda_function_event_invoke_config" "poller" {
  function_name                = aws_lambda_function.fn["poller"].function_name
  maximum_retry_attempts       = 0
  maximum_event_age_in_seconds = 60
}

# API and console: a Function URL. The API authenticates every route but /healthz with its own
# keys (Authorization: Bearer), and the console with a login and session cookie.
resource "aws_lambda_function_url" "api" {
  #checkov:skip=CKV_AWS_258:The API and console authenticate every request themselves (API keys with roles, console sessions); IAM auth would force SigV4 on the CLI and the browser.
  function_name      = aws_lambda_function.fn["api"].function_name
  authorization_type = "NONE"
}
