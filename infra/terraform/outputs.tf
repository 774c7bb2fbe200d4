output "api_url" {
  description = "The API and console (Function URL). Use it as PUNCTUAL_URL for the CLI."
  value       = aws_lambda_function_url.api.function_url
}

output "tasks_table" {
  description = "Name of the tasks table."
  value       = aws_dynamodb_table.tasks.name
}

output "leases_table" {
  description = "Name of the leases (and meta) table."
  value       = aws_dynamodb_table.leases.name
}

output "ready_queue_url" {
  description = "URL of the ready queue."
  value       = aws_sqs_queue.ready.id
}

output "dlq_url" {
  description = "URL of the dead-letter queue."
  value       = aws_sqs_queue.dlq.id
}

output "function_names" {
  description = "The three functions by role: worker, api, poller."
  value       = { for k, f in aws_lambda_function.fn : k => f.function_name }
}

output "kms_key_arn" {
  description = "The KMS key encrypting the tables, queues, environments and logs (null: AWS owned keys)."
  value       = local.kms_key_arn
}

output "init_command" {
  description = "Run once after the first apply: writes the meta item (shard count, creation minute); it finds the tables and queues in place."
  value       = "PUNCTUAL_AWS_PREFIX=${var.prefix} punctual init --max-receive-count ${var.max_receive_count} --shards 16"
}
