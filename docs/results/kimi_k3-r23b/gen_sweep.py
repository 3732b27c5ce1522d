"""Writes sweep1.json: TP-8 shard plan variants (issue 13, helper k23b). Run: python3 gen_sweep.py"""
import json

B1 = {
    "base": {},
    # qkv_a (32-row tensor-core CTAs, 114 of them)
    "a_k128s6": {"A_BK": 128, "A_ST": 6},
    "a_k256s5": {"A_ST": 5},
    "a_k512s3": {"A_BK": 512, "A_ST": 3},
    "a_k512s2": {"A_BK": 512, "A_ST": 2},
    "a16nw2": {"A_BN": 16, "A_NW": 2},
    "a16k512s3": {"A_BN": 16, "A_BK": 512, "A_ST": 3},
    "a_nw2": {"A_NW": 2},
    # q_b
    "qb_k64": {"QB_BK": 64},
    "qb_k256s3": {"QB_BK": 256, "QB_ST": 3},
    "qb_st6": {"QB_ST": 6},
    "qb_cn32": {"QB_CN": 32},
    "qb_nw2": {"QB_NW": 2},
    # W_UV + gate, o_proj (FMA 16-row, BK 256, 448 CTAs)
    "vc64": {"M_VC": 64},
    "o_ks2": {"O_KS": 2},
    "o_st4": {"O_ST": 4},
    "o_k512": {"O_BK": 512},
    "o_k128": {"O_BK": 128},
    "o_nw2": {"O_NW": 2},
    # moe_front (32-row tensor-core CTAs: 28 router + 1 top-k + 112 latent + 48 shared)
    "f_rbn16": {"F_RBN": 16},
    "f_rbn64": {"F_RBN": 64},
    "f_st4": {"F_ST": 4},
    "f_st2": {"F_ST": 2},
    "f_k512s2": {"F_BK": 512, "F_ST": 2},
    "f64": {"F_BN": 64, "F_BK": 128, "F_ST": 4},
    "f16nw2": {"F_BN": 16, "F_NW": 2},
    "f_nw2": {"F_NW": 2},
    "f_rbn16st4": {"F_RBN": 16, "F_ST": 4},
    # expert_up (192 CTAs of 64 rows)
    "u_st3": {"U_ST": 3},
    "u_st6": {"U_ST": 6},
    "u_k256s3": {"U_BK": 256, "U_ST": 3},
    "u_k64s6": {"U_BK": 64, "U_ST": 6},
    "u_nw2": {"U_NW": 2},
    # expert_down (112 column blocks x D_P 10 down CTAs, 448 tail CTAs)
    "dp16": {"D_P": 16},
    "dp12": {"D_P": 12},
    "dp5": {"D_P": 5},
    "d64p16": {"D_BN": 64, "D_P": 16},
    "d_k64": {"D_BK": 64},
    "d_st2": {"D_ST": 2},
    "d_st3": {"D_ST": 3},
    "d_nw2": {"D_NW": 2},
    "tbn8": {"T_BN": 8},
    "tbn32": {"T_BN": 32},
    "t_k128": {"T_BK": 128},
    "t_k512": {"T_BK": 512},
    # PDL between kernels 2..7, with and without an L2 prefetch of the first weight bytes
    "pdl": {"PDL": True},
    "pdl_pf1k": {"PDL": True, "PF": 1024},
    "pdl_pf4k": {"PDL": True, "PF": 4096},
    "st4": {"stages": 4},
    "base2": {},
}
B2 = {k: B1[k] for k in (
    "base", "a_k128s6", "a_k256s5", "a_k512s3", "qb_k64", "qb_st6", "o_ks2", "o_st4", "o_k512",
    "f_rbn16", "f_st4", "f_k512s2", "u_st3", "u_st6", "dp16", "dp5", "d_st3", "tbn8", "tbn32", "t_k128",
    "pdl", "pdl_pf1k", "base2")}
B8 = {
    "base": {},
    "a_k256": {"A_BK": 256},
    "a_k256s5": {"A_BK": 256, "A_ST": 5},
    "a_k128s6": {"A_ST": 6},
    "qb_k64": {"QB_BK": 64},
    "qb_st6": {"QB_ST": 6},
    "o_st4": {"O_ST": 4},
    "o_ks1": {"O_KS": 1},
    "f_rbn16": {"F_RBN": 16},
    "f_k256": {"F_BK": 256},
    "f_st6": {"F_ST": 6},
    "u_st3": {"U_ST": 3},
    "u_st6": {"U_ST": 6},
    "dp12": {"D_P": 12},
    "dp32": {"D_P": 32},
    "d_st3": {"D_ST": 3},
    "tbn16": {"T_BN": 16},
    "t_k256": {"T_BK": 256},
    "pdl": {"PDL": True},
    "pdl_pf1k": {"PDL": True, "PF": 1024},
    "base2": {},
}
out = {"1,4096,8": B1, "1,32768,8": B1, "2,4096,8": B2, "8,4096,8": B8}
with open("sweep1.json", "w") as f:
    json.dump(out, f, indent=1)
print(sum(len(v) for v in out.values()), "variants")
