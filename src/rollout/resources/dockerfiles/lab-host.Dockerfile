# A lab host: what a rented GPU container looks like from the outside, minus the GPU.
# Built FROM the debootstrapped base by `inv lab.up`; the build context is dockerfiles/.
ARG BASE=rollout-lab/base:latest
FROM ${BASE}
COPY lab-standin/lab-late-reaper lab-standin/lab-init lab-standin/curio lab-standin/nvidia-smi \
     /usr/local/bin/
RUN chmod 0755 /usr/local/bin/lab-late-reaper /usr/local/bin/lab-init /usr/local/bin/curio \
      /usr/local/bin/nvidia-smi \
 && mkdir -p /data /run/sshd /root/.ssh \
 && chmod 0700 /root/.ssh \
 && printf '%s\n' \
      'PermitRootLogin prohibit-password' \
      'PasswordAuthentication no' \
      'KbdInteractiveAuthentication no' \
      'UsePAM no' \
      'UseDNS no' \
      'HostKey /etc/ssh/ssh_host_ed25519_key' \
      'MaxStartups 100:30:200' \
      'MaxSessions 50' \
      > /etc/ssh/sshd_config.d/lab.conf
VOLUME /data
CMD ["/usr/local/bin/lab-init"]
