output "broker_public_ip" {
  description = "Where SSH reaches the broker host."
  value       = aws_instance.broker.public_ip
}

output "broker_private_ip" {
  description = "Where the clients reach the broker (pulsar://<this>:6650)."
  value       = aws_instance.broker.private_ip
}

output "client_public_ips" {
  description = "Where SSH reaches the client hosts; the first is the coordinator."
  value       = aws_instance.client[*].public_ip
}

output "client_private_ips" {
  description = "The client hosts' addresses inside the VPC; the first is the coordinator."
  value       = aws_instance.client[*].private_ip
}

output "coordinator_public_ip" {
  description = "The coordinator (bench run, the Locust master, the Spark master)."
  value       = aws_instance.client[0].public_ip
}

output "inventory_yaml" {
  description = "The Ansible inventory of these hosts; `make aws-up` writes it to .state/inventory.yml."
  value = templatefile("${path.module}/inventory.yml.tftpl", {
    run_name          = var.run_name
    ssh_user          = var.ssh_user
    private_key_file  = trimsuffix(pathexpand(var.ssh_public_key_path), ".pub")
    broker_public_ip  = aws_instance.broker.public_ip
    broker_private_ip = aws_instance.broker.private_ip
    nvme_devices      = var.broker_nvme_devices
    clients = [for c in aws_instance.client : {
      public_ip  = c.public_ip
      private_ip = c.private_ip
    }]
  })
}
