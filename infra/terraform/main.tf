# punctual on AWS: state (tables, queues, encryption) here, the functions in functions.tf, the
# alarms in alarms.tf. Every name below is one the code uses (store/src/aws/names.rs); the test
# tests/terraform.rs parses these files and fails when they drift apart.

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  tasks_table  = "${var.prefix}tasks"
  leases_table = "${var.prefix}leases"
  ready_queue  = "${var.prefix}ready"
  dlq          = "${var.prefix}dlq"

  kms_key_arn          = var.kms_key_arn != null ? var.kms_key_arn : (var.create_kms_key ? aws_kms_key.this[0].arn : null)
  log_group_arn_prefix = "arn:${data.aws_partition.current.partition}:logs:${data.aws_region.current.name}:${data.aws_caller_identity.current.account_id}:log-group:/aws/lambda/${var.prefix}"
}

# ---- encryption ---------------------------------------------------------------------------

resource "aws_kms_key" "this" {
  count = var.kms_key_arn == null && var.create_kms_key ? 1 : 0

  description             = "punctual (${var.prefix}): tables, queues, function environments, logs"
  enable_key_rotation     = true
  deletion_window_in_days = 30
  policy                  = data.aws_iam_policy_document.kms.json
  tags                    = var.tags
}

resource "aws_kms_alias" "this" {
  count = length(aws_kms_key.this)

  name          = "alias/${var.prefix}punctual"
  target_key_id = aws_kms_key.this[0].key_id
}

# The key's own policy: the account administers it (IAM policies then grant each function only
# what it uses), and CloudWatch Logs may use it for this deployment's log groups only.
data "aws_iam_policy_document" "kms" {
  #checkov:skip=CKV_AWS_109:A key policy's Resource "*" means this key only; administration stays with the account, as AWS's default key policy does.
  #checkov:skip=CKV_AWS_111:A key policy's Resource "*" means this key only; write access is limited to the account root and the logs service for this prefix's log groups.
  #checkov:skip=CKV_AWS_356:A key policy's Resource "*" means this key only.
  statement {
    sid       = "AccountAdministers"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }

  statement {
    sid       = "LogsEncryptThisDeploymentsLogGroups"
    actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
    resources = ["*"]

    principals {
      type        = "Service"
      identifiers = ["logs.${data.aws_region.current.name}.amazonaws.com"]
    }

    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = ["${local.log_group_arn_prefix}*"]
    }
  }
}

# ---- tables -------------------------------------------------------------------------------

# Tasks: key task_id; the sparse due index by_due (only waiting tasks carry due_bucket) and the
# sparse status index by_status (only DEAD and CANCELLED tasks carry status_part); TTL removes
# terminal tasks after their retention (expires_at, epoch seconds).
resource "aws_dynamodb_table" "tasks" {
  name                        = local.tasks_table
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "task_id"
  deletion_protection_enabled = true

  attribute {
    name = "task_id"
    type = "S"
  }

  attribute {
    name = "due_bucket"
    type = "S"
  }

  attribute {
    name = "due_key"
    type = "S"
  }

  attribute {
    name = "status_part"
    type = "S"
  }

  global_secondary_index {
    name               = "by_due"
    hash_key           = "due_bucket"
    range_key          = "due_key"
    projection_type    = "INCLUDE"
    non_key_attributes = ["version", "shard", "due_ms"]
  }

  global_secondary_index {
    name            = "by_status"
    hash_key        = "status_part"
    range_key       = "due_key"
    projection_type = "KEYS_ONLY"
  }

  ttl {
    attribute_name = "expires_at"
    enabled        = true
  }

  point_in_time_recovery {
    enabled = true
  }

  # With no customer managed key: the AWS managed key (aws/dynamodb).
  server_side_encryption {
    enabled     = true
    kms_key_arn = local.kms_key_arn
  }

  tags = var.tags
}

# Leases: one item per shard (pk "lease", sk "{shard:05}") and the meta item (pk = sk = "meta")
# that `punctual init` writes once: shard count and creation minute.
resource "aws_dynamodb_table" "leases" {
  name                        = local.leases_table
  billing_mode                = "PAY_PER_REQUEST"
  hash_key                    = "pk"
  range_key                   = "sk"
  deletion_protection_enabled = true

  attribute {
    name = "pk"
    type = "S"
  }

  attribute {
    name = "sk"
    type = "S"
  }

  point_in_time_recovery {
    enabled = true
  }

  # With no customer managed key: the AWS managed key (aws/dynamodb).
  server_side_encryption {
    enabled     = true
    kms_key_arn = local.kms_key_arn
  }

  tags = var.tags
}

# ---- queues -------------------------------------------------------------------------------

# Dead letters wait for an operator: retention longer than the ready queue's, so a message
# redriven near the end of its life still has the DLQ's full retention ahead.
resource "aws_sqs_queue" "dlq" {
  name                      = local.dlq
  message_retention_seconds = var.dlq_retention_seconds
  kms_master_key_id         = local.kms_key_arn
  sqs_managed_sse_enabled   = local.kms_key_arn == null ? true : null
  tags                      = var.tags
}

# The ready queue: messages {task_id, version, shard, due_ms} sent by the poller. A message
# received max_receive_count times (workers died on it) moves to the DLQ: the backstop behind
# the worker's own dead-lettering. The visibility timeout must cover the worker function's
# timeout (the event source mapping refuses less).
resource "aws_sqs_queue" "ready" {
  name                       = local.ready_queue
  message_retention_seconds  = var.ready_retention_seconds
  visibility_timeout_seconds = var.worker_timeout_seconds * 2
  kms_master_key_id          = local.kms_key_arn
  sqs_managed_sse_enabled    = local.kms_key_arn == null ? true : null

  redrive_policy = jsonencode({
    deadLetterTargetArn = aws_sqs_queue.dlq.arn
    maxReceiveCount     = var.max_receive_count
  })

  tags = var.tags

  lifecycle {
    precondition {
      condition     = var.ready_retention_seconds < var.dlq_retention_seconds
      error_message = "ready_retention_seconds must be shorter than dlq_retention_seconds."
    }
    precondition {
      condition     = var.worker_timeout_seconds * 1000 > var.run_timeout_ms
      error_message = "worker_timeout_seconds must exceed run_timeout_ms: the outcome is written before the function is cut."
    }
  }
}

# Only the ready queue may redrive into the DLQ.
resource "aws_sqs_queue_redrive_allow_policy" "dlq" {
  queue_url = aws_sqs_queue.dlq.id

  redrive_allow_policy = jsonencode({
    redrivePermission = "byQueue"
    sourceQueueArns   = [aws_sqs_queue.ready.arn]
  })
}
