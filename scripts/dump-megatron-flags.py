import argparse, sys, json
from megatron.training.arguments import add_megatron_arguments
p = argparse.ArgumentParser(allow_abbrev=False)
add_megatron_arguments(p)
flags = {}
for a in p._actions:
    for o in a.option_strings:
        if o.startswith('--'):
            if a.nargs == 0: kind = 'switch'
            elif a.nargs in ('+', '*') or isinstance(a.nargs, int): kind = 'list'
            else: kind = 'value'
            e = {'kind': kind}
            if a.choices is not None: e['choices'] = sorted(c.name if hasattr(c, 'name') else str(c) for c in a.choices)
            flags[o] = e
json.dump({'megatron_lm': 'core_v0.16.1', 'source': 'megatron/training/arguments.py add_megatron_arguments()', 'flags': flags}, sys.stdout, indent=1, sort_keys=True)
