"""Ansible inventories as ansible-core reads them, without ansible installed: group_vars/ and
host_vars/ (files, folders, precedence), ansible_group_priority, INI inline comments, YAML
`host:port` keys, a ProxyJump in ansible_ssh_common_args/extra_args, and the connection vars
rollout refuses by name (file, line, var)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.config.inventory import Host, load_inventory
from rollout.errors import ConfigError


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / next(iter(files))


def hosts(path: Path) -> dict[str, Host]:
    return {h.name: h for h in load_inventory(path).hosts}


@pytest.fixture(autouse=True)
def no_home_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_vars_folders_and_their_precedence(tmp_path: Path) -> None:
    inv = tree(tmp_path, {
        "hosts": "[web]\nw1 x=host-inv\nw2\n[prod:children]\nweb\n[prod:vars]\ny=prod-inv\n"
                 "[all:vars]\nz=all-inv\nansible_port=2200\n",
        "group_vars/all.yml": "z: all-file\ny: all-file\nansible_user: deploy\n",
        "group_vars/prod": "y: prod-file\nx: prod-file\n",
        "group_vars/web/a.yml": "x: web-a\nw: web-a\n",
        "group_vars/web/b/c.json": '{"w": "web-c"}',
        "group_vars/web/.hidden.yml": "w: hidden\n",
        "group_vars/web/old.yml~": "w: backup\n",
        "group_vars/web/readme.txt": "w: txt\n",
        "host_vars/w2.yaml": "x: w2-file\nansible_port: 2222\n",
    })  # fmt: skip
    found = hosts(inv)
    w1, w2 = found["w1"], found["w2"]
    # inventory all < inventory groups < group_vars/all < group_vars/GROUP (parent, child)
    # < the host's inventory vars < host_vars/HOST
    assert dict(w1.vars) == {"z": "all-file", "y": "prod-file", "x": "host-inv", "w": "web-c"}
    assert w2.vars["x"] == "w2-file" and (w2.port, w2.user) == (2222, "deploy")
    assert (w1.port, w1.user) == (2200, "deploy")


def test_only_the_first_of_name_and_its_extensions_is_read(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"hosts": "h1\n", "group_vars/ungrouped.yml": "v: yml\n",
                          "group_vars/ungrouped.yaml": "v: yaml\n",
                          "group_vars/ungrouped.json": '{"v": "json"}'})  # fmt: skip
    assert hosts(inv)["h1"].vars == {"v": "yml"}
    (tmp_path / "group_vars/ungrouped").write_text("v: none\n")
    assert hosts(inv)["h1"].vars == {"v": "none"}


@pytest.mark.parametrize(
    ("files", "where", "message"),
    [
        ({"group_vars/all.yml": "- a\n- b\n"}, "group_vars/all.yml:1",
         "expected a mapping of vars, got a list"),
        ({"host_vars/h1.yml": "$ANSIBLE_VAULT;1.1;AES256\n3132\n"}, "host_vars/h1.yml:1",
         "Vault-encrypted vars files are not supported"),
        ({"group_vars/all.yml": "x: !vault |\n  $ANSIBLE_VAULT;1.1\n"}, "group_vars/all.yml:1: x",
         "tagged values"),
        ({"group_vars/all.yml": "ansible_connection: winrm\n"},
         "group_vars/all.yml:1: ansible_connection", "not supported"),
        ({"host_vars/h1/z.yml": "ansible_port: 99999\n"}, "host_vars/h1/z.yml:1: h1: ansible_port",
         "less than or equal"),
        ({"group_vars/all.yml": "a: [\n"}, "group_vars/all.yml:2", "invalid YAML"),
    ],
)
def test_a_bad_vars_file_is_named_with_its_line(tmp_path: Path, files: dict[str, str],
                                                where: str, message: str) -> None:  # fmt: skip
    inv = tree(tmp_path, {"hosts": "h1\n", **files})
    with pytest.raises(ConfigError) as caught:
        load_inventory(inv)
    assert str(caught.value).startswith(f"{tmp_path}/{where}"), caught.value
    assert message in str(caught.value) and caught.value.exit_code == 2


def test_a_group_named_dot_dot_cannot_reach_outside_group_vars(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"inv/hosts": "[..]\nh1\n", "inv/group_vars/x.yml": "a: 1\n",
                          "secret.yml": "token: s3cret\n"})  # fmt: skip
    with pytest.raises(ConfigError, match="'..' cannot name a file in group_vars/"):
        load_inventory(inv)


def test_group_priority_orders_groups_of_the_same_depth(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"hosts": "[a]\nh1\n[b]\nh1\n[top:children]\na\n"
                          "[a:vars]\nx=a\nansible_group_priority=10\n[b:vars]\nx=b\n"
                          "[top:vars]\nx=top\nansible_group_priority=99\n"})  # fmt: skip
    # b and top are at depth 1 (top outranks b by priority), a at depth 2 over both
    assert hosts(inv)["h1"].vars == {"x": "a"}
    inv.write_text("[a]\nh1\n[b]\nh1\n[a:vars]\nx=a\nansible_group_priority=10\n[b:vars]\nx=b\n")
    assert hosts(inv)["h1"].vars == {"x": "a"}
    inv.write_text("[a]\nh1\n[a:vars]\nansible_group_priority=high\n")
    with pytest.raises(ConfigError, match=r"hosts:4: ansible_group_priority: .*not an integer"):
        load_inventory(inv)


def test_yaml_group_priority_and_host_port_keys(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"inv.yml": "a:\n  hosts:\n    h1:2201:\n    h2:2202:\n"
                          "      ansible_port: 2300\n  vars: {x: a, ansible_group_priority: 5}\n"
                          "b:\n  hosts:\n    h1:2201:\n  vars: {x: b}\n"})  # fmt: skip
    found = hosts(inv)
    assert list(found) == ["h1", "h2"]
    assert (found["h1"].port, found["h2"].port) == (2201, 2300)
    assert found["h1"].vars == {"x": "a"} and set(found["h1"].groups) == {"a", "b"}
    inv.write_text("all:\n  hosts:\n    h1:ssh:\n")
    with pytest.raises(ConfigError, match=r"inv.yml:3: h1: port 'ssh' of host 'h1'"):
        load_inventory(inv)


def test_ini_inline_comments_as_ansible_reads_them(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"hosts": "[g]\nh1 a=1 b=\"x # y\" c=plain # a comment\n"
                          "[g:vars]\ntext=hello # kept, as Ansible keeps it\n"
                          "semi=hi ; kept too\nquoted=\"q # r\"\nnumber=1 # a Python comment\n"
                          "listed=[1, 2] # also\nflag=FALSE\n"})  # fmt: skip
    assert hosts(inv)["h1"].vars == {
        "a": 1, "b": "x # y", "c": "plain", "text": "hello # kept, as Ansible keeps it",
        "semi": "hi ; kept too", "quoted": "q # r", "number": 1, "listed": [1, 2],
        "flag": "FALSE",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("args", "jump"),
    [
        ("ansible_ssh_common_args='-o ProxyJump=bastion'", "bastion"),
        ("ansible_ssh_common_args='-oProxyJump=ops@bastion:2200'", "bastion"),
        ("ansible_ssh_common_args='-o \"ProxyJump bastion\"'", "bastion"),
        ("ansible_ssh_common_args='-o ProxyJump bastion'", "bastion"),
        ("ansible_ssh_extra_args='-J bastion'", "bastion"),
        ("ansible_ssh_extra_args=-Jbastion", "bastion"),
        ("ansible_ssh_common_args='-J a' ansible_ssh_extra_args='-J a'", "a"),
    ],
)
def test_a_proxy_jump_in_ssh_args_is_proxy_jump(tmp_path: Path, args: str, jump: str) -> None:
    (host,) = load_inventory(tree(tmp_path, {"hosts": f"h1 {args}\n"})).hosts
    assert [hop.address for hop in host.proxy_jump] == [jump]
    assert not {"ansible_ssh_common_args", "ansible_ssh_extra_args"} & set(host.vars)


@pytest.mark.parametrize(
    ("line", "where", "message"),
    [
        ("h1 ansible_ssh_common_args='-o StrictHostKeyChecking=no'",
         "hosts:1: ansible_ssh_common_args", "ssh option 'StrictHostKeyChecking'"),
        ("h1 ansible_ssh_common_args='-o ProxyCommand=\"ssh -W %h:%p bastion\"'",
         "hosts:1: ansible_ssh_common_args", "ssh option 'ProxyCommand'"),
        ("h1 ansible_ssh_extra_args='-v -J b'", "hosts:1: ansible_ssh_extra_args",
         "ssh argument '-v'"),
        ("h1 ansible_ssh_extra_args='-J'", "hosts:1: ansible_ssh_extra_args", "-J without"),
        ("h1 ansible_ssh_common_args='-J a' ansible_ssh_extra_args='-J b'",
         "hosts:1: ansible_ssh_extra_args", "a second ProxyJump 'b'"),
        ("h1 ansible_ssh_common_args='-J a;id'", "hosts:1: h1: ansible_ssh_common_args",
         "'a;id' is not [user@]host[:port]"),
        ("h1 ansible_password=hunter2", "hosts:1: ansible_password", "password logins"),
        ("h1 ansible_ssh_pass=hunter2", "hosts:1: ansible_ssh_pass", "password logins"),
        ("h1 ansible_become=true", "hosts:1: ansible_become", "become (sudo/su)"),
        ("h1 ansible_ssh_executable=/opt/ssh", "hosts:1: ansible_ssh_executable",
         "runs no ssh"),
    ],
)
def test_connection_vars_rollout_cannot_honour_are_refused_by_name(
    tmp_path: Path, line: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_inventory(tree(tmp_path, {"hosts": line + "\n"}))
    assert str(caught.value).startswith(f"{tmp_path}/{where}"), caught.value
    assert message in str(caught.value)


def test_ignored_vars_stay_template_vars_and_become_false_is_fine(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"hosts": "h1 ansible_become=false ansible_become_user=postgres "
                          "ansible_python_interpreter=/usr/bin/python3\n"})  # fmt: skip
    (host,) = load_inventory(inv).hosts
    assert host.vars["ansible_python_interpreter"] == "/usr/bin/python3"


def test_yaml_words_are_booleans_as_in_ansibles_yaml_1_1(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"inv.yml": "all:\n  hosts:\n    h1:\n      a: yes\n      b: 'yes'\n"
                          "      c: [Off, \"off\"]\n      d: |\n        no\n",
                          "group_vars/all.yml": "enabled: no\nquoted: \"no\"\n"})  # fmt: skip
    assert hosts(inv)["h1"].vars == {"enabled": False, "quoted": "no", "a": True, "b": "yes",
                                     "c": [False, "off"], "d": "no\n"}  # fmt: skip


def test_a_symlink_loop_in_a_vars_folder_is_a_clean_error(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"hosts": "h1\n", "group_vars/all/a.yml": "a: 1\n"})
    (tmp_path / "group_vars/all/loop").symlink_to(tmp_path / "group_vars/all")
    with pytest.raises(ConfigError, match="symlink loop") as caught:
        load_inventory(inv)
    assert str(caught.value).startswith(f"{tmp_path}/group_vars/all/loop")


def test_a_fifo_as_vars_file_is_refused_not_read(tmp_path: Path) -> None:
    inv = tree(tmp_path, {"hosts": "h1\n", "host_vars/other.yml": "a: 1\n"})
    os.mkfifo(tmp_path / "host_vars/h1")
    with pytest.raises(ConfigError, match="not a file nor a folder"):
        load_inventory(inv)
