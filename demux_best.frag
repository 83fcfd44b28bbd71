#version 100
#ifdef GL_FRAGMENT_PRECISION_HIGH
precision highp float;
precision highp sampler2D;
#else
precision mediump float;
#endif
uniform sampler2D u_in0;
uniform sampler2D u_image;
uniform vec2 u_in_texel;
uniform vec2 u_in_size;
void main() {
    vec2 fc = gl_FragCoord.xy;
    vec2 o = fc - 0.5;
    vec2 lr = floor(fc * 0.5);
    vec2 sub = o - lr * 2.0;
    vec2 uv = (lr + 0.5) * u_in_texel;
    vec4 t0 = texture2D(u_in0, uv);
    vec4 v = (sub.y < 0.5 ? (sub.x < 0.5 ? vec4(t0.x, 0.0, 0.0, 0.0) : vec4(t0.y, 0.0, 0.0, 0.0)) : (sub.x < 0.5 ? vec4(t0.z, 0.0, 0.0, 0.0) : vec4(t0.w, 0.0, 0.0, 0.0)));
    vec2 s = step(vec2(1.0), sub);
    vec2 i0 = lr + s - 1.0;
    vec2 f = (sub + 0.5) * 0.5 + 0.5 - s;
    vec2 lo = (i0 + 0.5) * u_in_texel;
    vec2 hi = (i0 + 1.5) * u_in_texel;
    vec3 c00 = texture2D(u_image, lo).rgb;
    vec3 c10 = texture2D(u_image, vec2(hi.x, lo.y)).rgb;
    vec3 c01 = texture2D(u_image, vec2(lo.x, hi.y)).rgb;
    vec3 c11 = texture2D(u_image, hi).rgb;
    vec3 rgb = mix(mix(c00, c10, f.x), mix(c01, c11, f.x), f.y);
    float y = v.x;
    y = (0.5 + 2.0 * (y - 0.5) * abs(y - 0.5));
    y = clamp(dot(s.y > 0.5 ? (s.x > 0.5 ? c00 : c10) : (s.x > 0.5 ? c01 : c11), vec3(0.298999995, 0.587000012, 0.114)) + 0.75 * (y - 0.5), 0.0, 1.0);
    gl_FragColor = vec4(rgb + (y - dot(rgb, vec3(0.298999995, 0.587000012, 0.114))), 1.0);
}
