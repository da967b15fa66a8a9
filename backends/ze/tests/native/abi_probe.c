/*
 * ABI probe for aml-ze: prints, from Debian's libze-dev headers (API 1.4: ze_api.h, and
 * zes_api.h for Sysman), every Level Zero constant, enum value, struct size and field
 * offset that aml_ze.abi uses, as "NAME VALUE" lines. The list of names is generated from
 * aml_ze.abi by test_ze_abi.py into abi_items.h (VALUE(...) / SIZE(...) / OFFSET(...)
 * lines), so that the probe checks exactly what the bindings use:
 *
 *     gcc -I<dir of abi_items.h> -o abi_probe abi_probe.c
 */
#include <stddef.h>
#include <stdio.h>

#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>

#define VALUE(name) printf("%s %lld\n", #name, (long long)(name))
#define SIZE(type) printf("sizeof(%s) %zu\n", #type, sizeof(type))
#define OFFSET(type, field) printf("offsetof(%s,%s) %zu\n", #type, #field, offsetof(type, field))

int main(void)
{
    printf("ZE_API_VERSION_CURRENT %lld\n", (long long)ZE_API_VERSION_CURRENT);
#include "abi_items.h"
    return 0;
}
