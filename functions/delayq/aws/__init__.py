"""AWS beneath the store and the targets: one boto3 client per service, and Secrets Manager reads."""
